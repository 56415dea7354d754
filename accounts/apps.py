from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import accounts.panel_sessions  # noqa: F401  (records each sign-in's session)
        import gshost.api.schema  # noqa: F401  (registers the OpenAPI auth scheme)
