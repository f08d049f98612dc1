"""Celery tasks of the jobs app: thin, one service call each."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from .idle_services import jobs_idle_sweep
from .notifications import job_notify


@shared_task(name="jobs.notify", time_limit=60)
def job_notify_task(job_id: int, state: str) -> bool:
    return job_notify(job_id=job_id, state=state)


@shared_task(name="jobs.idle_sweep", time_limit=120)
def jobs_idle_sweep_task() -> dict[str, list[int]]:
    sweep = jobs_idle_sweep(now=timezone.now())
    return {"warned": sweep.warned, "cleared": sweep.cleared, "reaped": sweep.reaped}
