"""The Celery application. Every periodic schedule is declared here, in one place."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("gpulab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Every periodic schedule, in one place. `expires` drops a tick nobody picked up in time
# (a backlog of stale rounds is useless: the next one reads fresh state anyway).
# The round's own interval is a live setting (SchedulerConfig.round_interval_seconds,
# default 10 s): beat ticks every second and the task runs a round only once it is due.
app.conf.beat_schedule = {
    "scheduling-round": {
        "task": "scheduler.round",
        "schedule": 1.0,
        "kwargs": {"trigger": "timer"},
        "options": {"expires": 1.0},
    },
    # Demo nodes only: finishes and requeues jobs on nodes marked `simulated`.
    "simulated-agents": {
        "task": "agents.simulated_tick",
        "schedule": 2.0,
        "options": {"expires": 2.0},
    },
}
