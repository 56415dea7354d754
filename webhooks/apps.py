import sys

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.models import Schedule
        from django_q.signals import post_spawn

        from gshost.monitoring.metrics import register_scrape_collector
        from gshost.schedules import Definition, schedule_after_migrate
        from webhooks.delivery.process import shield_cluster_children, start_in_worker
        from webhooks.metrics import backlog_collector
        from webhooks.targets.client import use_configured_sender

        register_scrape_collector(backlog_collector)
        use_configured_sender()  # in development, the demo receiver's names resolve to loopback

        # Each django-q2 worker process runs a delivery engine (sender threads) of its own.
        post_spawn.connect(start_in_worker, dispatch_uid="webhooks.delivery.engine")
        shield_cluster_children(sys.argv)
        schedule_after_migrate(
            self,
            Definition(
                "webhooks.purge_history", "webhooks.tasks.purge_delivery_history", Schedule.HOURLY
            ),
            # The minute-long sweep task of earlier versions: the engine's senders do its work.
            retired=("webhooks.sweep",),
        )
