from django.apps import AppConfig


class ApplicationConfig(AppConfig):
    """The Application API: what billing systems call to sell servers (docs/application-api.md)."""

    name = "application"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule

        from gshost.schedules import Definition, schedule_after_migrate

        schedule_after_migrate(
            self,
            Definition(
                "application.purge_expired",
                "application.retention.application_purge_expired",
                Schedule.HOURLY,
            ),
        )
