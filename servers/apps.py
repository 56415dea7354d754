from django.apps import AppConfig


class ServersConfig(AppConfig):
    name = "servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule
        from django_q.signals import post_spawn

        from gshost.schedules import Definition, schedule_after_migrate
        from gshost.withdrawals import on_access_withdrawn
        from servers.agents.withdrawal_push import withdrawal_push
        from servers.recovery import start_catch_up
        from servers.tasks import TICK_SCHEDULE_NAME

        # A lost follow-up task must never leave a server `starting`: a thread in each worker,
        # which needs no broker, finishes overdue work from the rows.
        post_spawn.connect(start_catch_up, dispatch_uid="servers.catch_up")
        # Withdrawn access reaches the nodes' open console sockets (docs/console.md).
        on_access_withdrawn(withdrawal_push)

        schedule_after_migrate(
            self,
            Definition(TICK_SCHEDULE_NAME, "servers.tasks.tick", Schedule.MINUTES, 1),
            Definition("servers.purge_minutes", "servers.tasks.purge_minutes", Schedule.HOURLY),
        )
