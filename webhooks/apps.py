from django.apps import AppConfig
from django.db.models.signals import post_migrate


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from webhooks.schedules import on_post_migrate

        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="webhooks.schedules")
