"""Celery tasks of the jobs app: thin, one service call each."""

from __future__ import annotations

from celery import shared_task

from .notifications import job_notify


@shared_task(name="jobs.notify", time_limit=60)
def job_notify_task(job_id: int, state: str) -> bool:
    return job_notify(job_id=job_id, state=state)
