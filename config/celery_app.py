"""The Celery application. Every periodic schedule is declared here, in one place."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("gpulab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Periodic work (scheduling rounds, node liveness, metric roll-ups) is added by the
# control-loop issue; keeping the dict here keeps "what runs when" in one file.
app.conf.beat_schedule = {}
