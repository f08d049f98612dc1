from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    default_auto_field = "django.db.models.BigAutoField"
