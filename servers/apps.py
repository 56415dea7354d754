from django.apps import AppConfig


class ServersConfig(AppConfig):
    name = "servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule

        from gshost import handoff
        from gshost.schedules import Definition, schedule_after_migrate
        from servers.recovery import finish_overdue_work
        from servers.tasks import TICK_SCHEDULE_NAME

        # A lost follow-up task must never leave a server `starting`: the workers' timer,
        # which needs no broker, finishes overdue work from the rows.
        handoff.register_catch_up(finish_overdue_work)

        schedule_after_migrate(
            self, Definition(TICK_SCHEDULE_NAME, "servers.tasks.tick", Schedule.MINUTES, 1)
        )
