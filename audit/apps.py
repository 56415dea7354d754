from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule

        from gshost.schedules import Definition, schedule_after_migrate

        schedule_after_migrate(
            self,
            Definition(
                "audit.purge_expired", "audit.services.audit_purge_expired", Schedule.HOURLY
            ),
        )
