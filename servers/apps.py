from django.apps import AppConfig


class ServersConfig(AppConfig):
    name = "servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule

        from gshost.schedules import Definition, schedule_after_migrate
        from servers.tasks import TICK_SCHEDULE_NAME

        schedule_after_migrate(
            self, Definition(TICK_SCHEDULE_NAME, "servers.tasks.tick", Schedule.MINUTES, 1)
        )
