"""gpulab's project package: settings, URLs, the Celery app and cross-cutting errors."""

from .celery_app import app as celery_app

__all__ = ("celery_app",)
