from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the node-agent token scheme with drf-spectacular (imported for its effect).
        from . import schema  # noqa: F401
