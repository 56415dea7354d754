from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ServersConfig(AppConfig):
    name = "servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(register_periodic_tasks, sender=self, dispatch_uid="servers.tick")


def register_periodic_tasks(**kwargs: Any) -> None:
    """The minute tick as a django-q2 schedule; migrating again changes nothing."""
    from django_q.models import Schedule

    from servers.tasks import TICK_SCHEDULE_NAME

    Schedule.objects.using(kwargs.get("using", "default")).update_or_create(
        name=TICK_SCHEDULE_NAME,
        defaults={
            "func": "servers.tasks.tick",
            "schedule_type": Schedule.MINUTES,
            "minutes": 1,
            "repeats": -1,
        },
    )
