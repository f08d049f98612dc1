"""Simulated node agents for the demo: they "run" jobs on nodes marked `simulated`.

They drive jobs through the same state-machine services a real agent's reports do
(STARTING → RUNNING → SUCCEEDED, PREEMPTING → PENDING after the grace period), so the
demo exercises the real scheduler and bookkeeping; only the container is imaginary.

How long a simulated job runs: `sleep N` runs N seconds; anything else runs
`DEFAULT_DURATION_SECONDS`. Progress survives preemption (it resumes from a checkpoint),
measured by the job's total time on devices.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from config.errors import ApplicationError
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import job_finish, job_mark_running, job_requeue

logger = logging.getLogger(__name__)

DEFAULT_DURATION_SECONDS = 300.0


def simulated_duration(command: list[str]) -> float:
    """Seconds a simulated job needs on its devices."""
    if len(command) == 2 and command[0] in {"sleep", "/bin/sleep"}:
        try:
            return max(float(command[1]), 0.0)
        except ValueError:
            pass
    return DEFAULT_DURATION_SECONDS


def simulated_launch(*, job_id: int) -> None:
    """The container 'starts' at once."""
    try:
        job_mark_running(job_id=job_id, message="Simulated agent: running.")
    except ApplicationError as exc:  # cancelled or otherwise moved on meanwhile
        logger.info("Simulated launch of job %s skipped: %s", job_id, exc)


def simulated_tick(*, grace_seconds: float) -> int:
    """Advance every simulated job: finish those done, requeue preempted ones. Returns changes.

    1. RUNNING jobs whose time on devices (stored + current run) reaches their duration
       exit with code 0.
    2. PREEMPTING jobs whose grace period has passed are requeued (checkpoint taken).
    3. STARTING jobs whose launch was missed (e.g. a restart) are marked running.
    """
    now = timezone.now()
    simulated = Q(allocations__ended_at__isnull=True, allocations__device__node__simulated=True)
    changes = 0
    active = (
        Job.objects.filter(
            simulated, state__in=(JobState.RUNNING, JobState.PREEMPTING, JobState.STARTING)
        )
        .distinct()
        .values("id", "state", "command", "total_run_seconds", "started_at", "updated_at")
    )
    for row in active:
        try:
            if row["state"] == JobState.STARTING:
                job_mark_running(job_id=row["id"], message="Simulated agent: running.")
            elif row["state"] == JobState.RUNNING:
                current_run = (
                    (now - row["started_at"]).total_seconds() if row["started_at"] else 0.0
                )
                if row["total_run_seconds"] + current_run >= simulated_duration(row["command"]):
                    job_finish(job_id=row["id"], exit_code=0, message="Simulated agent: done.")
                else:
                    continue
            elif now - row["updated_at"] >= timedelta(seconds=grace_seconds):
                job_requeue(job_id=row["id"], message="Checkpointed after preemption; requeued.")
            else:
                continue
        except ApplicationError as exc:
            logger.info("Simulated agent left job %s alone: %s", row["id"], exc)
            continue
        changes += 1
    return changes
