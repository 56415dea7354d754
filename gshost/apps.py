from django.apps import AppConfig


class GshostConfig(AppConfig):
    """The project package as an app: it owns the project-wide system checks."""

    name = "gshost"
    verbose_name = "gshost"

    def ready(self) -> None:
        from gshost import checks  # noqa: F401  (registers them)
