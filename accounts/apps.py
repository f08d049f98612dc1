from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the API-token scheme with drf-spectacular (imported for its effect).
        from . import schema  # noqa: F401
