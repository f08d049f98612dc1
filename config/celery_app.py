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
    # Demo nodes only: heartbeats from a simulated NVML through the real agent's collector.
    "simulated-heartbeats": {
        "task": "agents.simulated_heartbeats",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    # Real nodes over SSH: record attempts that exited, stop orphaned and stale ones.
    "agents-poll": {
        "task": "agents.poll_all",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    # Heartbeat liveness: silent nodes become SUSPECT (40 s), then DOWN (5 min), and the
    # jobs of DOWN nodes are requeued.
    "node-liveness": {
        "task": "agents.liveness_sweep",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    # GPU metrics: per-minute roll-ups; raw samples kept 24 h, minutes 30 days.
    "metrics-rollup": {
        "task": "agents.metrics_rollup",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # DRAINING nodes whose last job has left become DRAINED.
    "node-drain-settle": {
        "task": "agents.drain_settle",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    # Dashboard aggregates: usage per hour, queue and utilization samples, heatmap buckets.
    "dashboard-aggregates": {
        "task": "dashboard.aggregates_update",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
}
