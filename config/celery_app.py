"""The Celery application. Every periodic schedule is declared here, in one place."""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("gpulab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Queues by kind of work, each served by its own worker (docker-compose.yml), so a round
# never waits for a worker slot behind SSH work: a launch may take GPULAB_LAUNCH_TIMEOUT_
# SECONDS (an image pull), a stop the preemption grace (up to an hour).
# - scheduler: short control-plane tasks that others wait on (rounds, liveness, drains,
#   and the poll's fan-out, which asks again for lost launches and stops);
# - ssh: everything that talks to nodes over SSH;
# - the default queue (`celery`): the rest (metrics roll-ups, dashboard aggregates,
#   housekeeping, demo agents).
SCHEDULER_QUEUE = "scheduler"
SSH_QUEUE = "ssh"
TASK_QUEUES = {
    "scheduler.round": SCHEDULER_QUEUE,
    "agents.poll_all": SCHEDULER_QUEUE,
    "agents.liveness_sweep": SCHEDULER_QUEUE,
    "agents.drain_settle": SCHEDULER_QUEUE,
    "agents.launch": SSH_QUEUE,
    "agents.stop": SSH_QUEUE,
    "agents.node_poll": SSH_QUEUE,
    "agents.node_return_reconcile": SSH_QUEUE,
    "agents.node_prune": SSH_QUEUE,
    "agents.node_logs_archive": SSH_QUEUE,
}


def queue_name(kind: str) -> str:
    """The queue of one kind of work, as workers must name it in `-Q`.

    With Celery's default queue (`celery`), just `kind`. Where the default queue was
    renamed (each test run does, so runs sharing one Redis never take each other's
    tasks), the other queues follow it: `<default>.<kind>`.
    """
    default = app.conf.task_default_queue
    return kind if default == "celery" else f"{default}.{kind}"


def task_route(
    name: str, args: object, kwargs: object, options: object, **_: object
) -> dict | None:
    """Celery router (CELERY_TASK_ROUTES): a task's queue by its name; None = default."""
    kind = TASK_QUEUES.get(name)
    return {"queue": queue_name(kind)} if kind else None


# Every periodic schedule, in one place. `expires` drops a tick nobody picked up in time
# (a backlog of stale rounds is useless: the next one reads fresh state anyway).
# The round's own interval is a live setting (SchedulerConfig.round_interval_seconds,
# default 10 s): beat ticks every second and the task runs a round only once it is due.
# Hourly and daily work runs at fixed times of the clock (crontab, in CELERY_TIMEZONE =
# TIME_ZONE), not at intervals: beat keeps when it last ran a task in a file the container
# loses on every redeploy, and an interval counts from beat's start, so a lab deploying
# more often than that interval would never run the task.
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
    # Idle reaping (when an admin switched it on): warn, then cancel, idle running jobs.
    "idle-sweep": {
        "task": "jobs.idle_sweep",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # Estimated start times of pending jobs: the scheduler replayed forward.
    "start-forecasts": {
        "task": "scheduler.forecast",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # Real nodes, every minute: copy the logs of attempts that ended into the database.
    "attempt-logs-archive": {
        "task": "agents.logs_archive_all",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # Real nodes, hourly (at :30): remove finished attempts' containers and run
    # directories once they are GPULAB_FINISHED_ATTEMPT_KEEP_DAYS old (7 by default).
    "finished-attempts-prune": {
        "task": "agents.prune_all",
        "schedule": crontab(minute=30),
        "options": {"expires": 600.0},
    },
    # Housekeeping, daily at 03:00 and 03:15 lab time: expired login sessions (Django's
    # `clearsessions`), and round records older than GPULAB_ROUND_HISTORY_DAYS (30 by
    # default).
    "sessions-clear": {
        "task": "housekeeping.sessions_clear",
        "schedule": crontab(hour=3, minute=0),
        "options": {"expires": 3600.0},
    },
    "scheduling-rounds-prune": {
        "task": "scheduler.rounds_prune",
        "schedule": crontab(hour=3, minute=15),
        "options": {"expires": 3600.0},
    },
}


@app.task(name="housekeeping.sessions_clear", time_limit=600)
def sessions_clear_task() -> None:
    """Delete expired sessions; Django never does by itself (database sessions)."""
    from django.core.management import call_command

    call_command("clearsessions")
