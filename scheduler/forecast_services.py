"""Estimated start times for pending jobs: the live snapshot, run forward, stored per job.

Every minute (beat, or the embedded demo loop) `start_forecasts_refresh`:

1. builds the snapshot a round would (`snapshot_build`), cut to the pending jobs nearest
   the head of the line (GPULAB_FORECAST_MAX_JOBS, by the last round's queue position);
2. estimates how long each job still runs (`_work_left`): the time its walltime leaves,
   or less where its owner's recent jobs ran shorter;
3. replays it through the configured policy (`scheduler.sim.forecast`) until each
   pending job has started, GPULAB_FORECAST_HORIZON_HOURS have passed, or
   GPULAB_FORECAST_BUDGET_SECONDS of computing are spent;
4. stores one `StartForecast` per pending job: the time, or why there is none.

Nothing else reads the forecast: it never changes what the scheduler does.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings as django_settings
from django.db import transaction
from django.db.models import F

from jobs.choices import TERMINAL_STATES, JobState
from jobs.models import Job
from scheduler.core.types import JobPhase, Snapshot
from scheduler.sim.forecast import Forecast, forecast_starts

from .models import StartForecast, StartForecastScore
from .selectors import (
    ACCURACY_MIN_WAIT_SECONDS,
    ForecastAccuracy,
    scheduler_config_get,
    scheduler_settings_from,
    start_forecast_accuracy,
)
from .snapshot import snapshot_build

logger = logging.getLogger(__name__)

# A job with no walltime runs as long as its owner's recent jobs typically did: the median
# of their last OWNER_HISTORY runs, once there are OWNER_MIN_RUNS of them; else the lab's
# median over its last LAB_HISTORY runs; else DEFAULT_RUN_SECONDS.
OWNER_HISTORY = 50
OWNER_MIN_RUNS = 5
LAB_HISTORY = 2000
DEFAULT_RUN_SECONDS = 3600.0
# A running job already past its typical run is expected to run on for at least half as
# long again as it has (the longer a job has run, the longer it tends to run on), never
# less than a minute.
MIN_RUN_LEFT_SECONDS = 60.0

HELD_NOTE = "no estimate while it is held (see its reason)"
BEYOND_CUT_NOTE = "no estimate: more than {count} jobs are ahead of it"
NEVER_NOTE = "no estimate: the GPUs that are up now could never hold it"


@dataclass(frozen=True)
class ForecastSummary:
    pending: int
    estimated: int
    stop_reason: str
    wall_seconds: float


def start_forecasts_refresh(*, now: datetime) -> ForecastSummary:
    """Forecast every pending job's start as of `now` and store it (see the module)."""
    config = scheduler_config_get()
    settings = scheduler_settings_from(config)
    snapshot, _ = snapshot_build(now=now, settings=settings)
    limit = django_settings.GPULAB_FORECAST_MAX_JOBS
    snapshot, beyond = _nearest_pending(snapshot, limit=limit)
    forecast = forecast_starts(
        snapshot,
        work_left=_work_left(snapshot, now=now),
        stopping_left=float(config.preemption_grace_seconds),
        horizon=django_settings.GPULAB_FORECAST_HORIZON_HOURS * 3600.0,
        tick=config.round_interval_seconds,
        wall_budget=django_settings.GPULAB_FORECAST_BUDGET_SECONDS,
        usage_half_life=django_settings.GPULAB_USAGE_HALF_LIFE_HOURS * 3600.0,
    )
    pending = [
        job.id
        for job in snapshot.jobs
        if job.phase is JobPhase.PENDING and job.id not in forecast.never
    ]
    notes = {job_id: BEYOND_CUT_NOTE.format(count=limit) for job_id in beyond}
    notes |= {job_id: NEVER_NOTE for job_id in forecast.never}
    miss = _missing_note(forecast)
    accuracy = start_forecast_accuracy(now=now)
    _score_store(accuracy, now=now)
    rows = [
        _row(job_id, now=now, start=forecast.starts.get(job_id), accuracy=accuracy, miss=miss)
        for job_id in pending
    ] + [StartForecast(job_id=job_id, made_at=now, note=note) for job_id, note in notes.items()]
    _store(rows, now=now)
    logger.info(
        "Start forecast: %d of %d pending jobs estimated in %.2f s (%s).",
        len(forecast.starts),
        len(pending) + len(notes),
        forecast.wall_seconds,
        forecast.stop_reason,
    )
    return ForecastSummary(
        pending=len(pending) + len(notes),
        estimated=len(forecast.starts),
        stop_reason=forecast.stop_reason,
        wall_seconds=forecast.wall_seconds,
    )


def _nearest_pending(snapshot: Snapshot, *, limit: int) -> tuple[Snapshot, list[int]]:
    """The snapshot with only the `limit` pending jobs nearest the head of the line (the
    last round's order), and the ids of those left out. Jobs further back can only start
    after most of these: replaying them would cost time and change little before them."""
    pending = [job.id for job in snapshot.jobs if job.phase is JobPhase.PENDING]
    if len(pending) <= limit:
        return snapshot, []
    positions = dict(Job.objects.filter(pk__in=pending).values_list("pk", "queue_position"))
    line = sorted(
        pending,
        key=lambda job_id: (positions.get(job_id) is None, positions.get(job_id) or 0, job_id),
    )
    kept, beyond = set(line[:limit]), line[limit:]
    jobs = tuple(job for job in snapshot.jobs if job.phase is JobPhase.RUNNING or job.id in kept)
    return replace(snapshot, jobs=jobs), beyond


def _work_left(snapshot: Snapshot, *, now: datetime) -> dict[int, float]:
    """Wall seconds each job of `snapshot` still runs (running: from now; pending: once
    started): the rest of its walltime, or of its owner's typical run if that is less,
    and for a running job already past that, half again what it has run (at least
    MIN_RUN_LEFT_SECONDS)."""
    rows = Job.objects.filter(pk__in=[job.id for job in snapshot.jobs]).values_list(
        "pk", "owner_id", "walltime_seconds", "total_run_seconds", "state", "started_at"
    )
    restore = snapshot.settings.restore_cost
    typical = _typical_runs()
    lab = typical.pop(None)
    work: dict[int, float] = {}
    for job_id, owner_id, walltime, total_run, state, started_at in rows:
        ran = total_run
        if state != JobState.PENDING and started_at is not None:
            ran += max((now - started_at).total_seconds(), 0.0)
        expected = max(typical.get(owner_id, lab) - ran, 0.5 * ran, MIN_RUN_LEFT_SECONDS)
        if walltime is not None:
            # A job resuming from a checkpoint spends the restore cost of its walltime too.
            resumes = state == JobState.PENDING and ran > 0
            expected = min(expected, max(walltime - ran - (restore if resumes else 0.0), 0.0))
        work[job_id] = expected
    for job in snapshot.jobs:  # deleted since the snapshot: gone at once, as good as any
        work.setdefault(job.id, 0.0)
    return work


def _typical_runs() -> dict[int | None, float]:
    """Median run (wall seconds, all attempts) of recent ended jobs that ran: per owner
    with enough of them, and the lab's under the key None."""
    recent = (
        Job.objects.filter(state__in=TERMINAL_STATES, total_run_seconds__gt=0)
        .order_by(F("finished_at").desc(nulls_last=True), "-id")
        .values_list("owner_id", "total_run_seconds")[:LAB_HISTORY]
    )
    per_owner: dict[int, list[float]] = defaultdict(list)
    everyone: list[float] = []
    for owner_id, seconds in recent:
        everyone.append(seconds)
        if len(per_owner[owner_id]) < OWNER_HISTORY:
            per_owner[owner_id].append(seconds)
    typical: dict[int | None, float] = {
        owner_id: statistics.median(runs)
        for owner_id, runs in per_owner.items()
        if len(runs) >= OWNER_MIN_RUNS
    }
    typical[None] = statistics.median(everyone) if everyone else DEFAULT_RUN_SECONDS
    return typical


def _row(
    job_id: int,
    *,
    now: datetime,
    start: float | None,
    accuracy: ForecastAccuracy | None,
    miss: str,
) -> StartForecast:
    """One job's forecast, with its likely range where past forecasts were scored and the
    wait is long enough for a range to mean something."""
    if start is None:
        return StartForecast(job_id=job_id, made_at=now, note=miss)
    at = datetime.fromtimestamp(start, tz=UTC)
    row = StartForecast(job_id=job_id, made_at=now, start_at=at)
    wait = (at - now).total_seconds()
    if accuracy is not None and wait >= ACCURACY_MIN_WAIT_SECONDS:
        row.earliest_at = now + timedelta(seconds=wait * accuracy.low)
        row.latest_at = now + timedelta(seconds=wait * accuracy.high)
    return row


def _score_store(accuracy: ForecastAccuracy | None, *, now: datetime) -> None:
    """Keep the accuracy just measured for the pages (`StartForecastScore`)."""
    if accuracy is None:
        StartForecastScore.objects.filter(pk=1).delete()
        return
    StartForecastScore.objects.update_or_create(
        pk=1,
        defaults={
            "measured_at": now,
            "samples": accuracy.samples,
            "low": accuracy.low,
            "median": accuracy.median,
            "high": accuracy.high,
        },
    )


def _missing_note(forecast: Forecast) -> str:
    """Why a pending job the replay did not start has no estimate."""
    reason = forecast.stop_reason
    if reason.startswith("horizon"):
        hours = django_settings.GPULAB_FORECAST_HORIZON_HOURS
        return f"no estimate: not expected to start within {hours} h"
    if reason.startswith("wall-clock budget"):
        return "no estimate: too many jobs ahead of it to forecast in time"
    # The replay ran out of events with the job still waiting (e.g. a quota it can never
    # fit under while its owner's other jobs run on).
    return "no estimate: the scheduler never started it in the forecast (see its reason)"


def _store(rows: list[StartForecast], *, now: datetime) -> None:
    """Upsert this forecast; keep each job's first estimate (for accuracy); and mark the
    pending jobs it left out (held by a dependency, an array cap, a retry's backoff)."""
    forecast_ids = [row.job_id for row in rows]
    with transaction.atomic():
        # A job deleted since the snapshot would fail the insert: leave it out.
        present = set(Job.objects.filter(pk__in=forecast_ids).values_list("pk", flat=True))
        StartForecast.objects.bulk_create(
            [row for row in rows if row.job_id in present],
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["made_at", "start_at", "earliest_at", "latest_at", "note"],
            batch_size=1000,
        )
        StartForecast.objects.filter(
            made_at=now, start_at__isnull=False, first_start_at__isnull=True
        ).update(first_made_at=F("made_at"), first_start_at=F("start_at"))
        # Submitted or requeued after the snapshot: not held, just not forecast yet.
        held = (
            Job.objects.filter(state=JobState.PENDING, submitted_at__lte=now)
            .exclude(pending_since__gt=now)
            .exclude(pk__in=forecast_ids)
        )
        StartForecast.objects.bulk_create(
            [
                StartForecast(job_id=job_id, made_at=now, note=HELD_NOTE)
                for job_id in held.values_list("pk", flat=True)
            ],
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["made_at", "start_at", "earliest_at", "latest_at", "note"],
            batch_size=1000,
        )
