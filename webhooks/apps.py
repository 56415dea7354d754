import sys

from django.apps import AppConfig
from django.conf import settings


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

        register_scrape_collector(backlog_collector)
        if settings.DEV_WEBHOOK_LOOPBACK_HOSTS:  # development only: empty unless DEBUG is on
            from webhooks.targets.dev_loopback import install

            install(frozenset(host.lower() for host in settings.DEV_WEBHOOK_LOOPBACK_HOSTS))

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
