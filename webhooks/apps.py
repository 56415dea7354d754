from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule

        from gshost.monitoring.metrics import register_scrape_collector
        from gshost.schedules import Definition, schedule_after_migrate
        from webhooks.metrics import backlog_collector

        register_scrape_collector(backlog_collector)

        schedule_after_migrate(
            self,
            # Every minute a ~60 s task polls for due deliveries and expired leases
            # (see engine.sweep).
            Definition("webhooks.sweep", "webhooks.tasks.sweep_deliveries", Schedule.MINUTES, 1),
            Definition(
                "webhooks.purge_history", "webhooks.tasks.purge_delivery_history", Schedule.HOURLY
            ),
        )
