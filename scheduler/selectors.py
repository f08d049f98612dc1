"""Reads of the scheduler's stored settings and round history."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, QuerySet
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Allocation, Job
from scheduler.core.types import PlacementKind, SchedulerSettings

from .choices import RoundOutcome
from .models import (
    MAX_PREEMPTION_GRACE_SECONDS,
    SchedulerConfig,
    SchedulingRound,
    StartForecast,
    StartForecastScore,
)

# The poll (every 10 s) stops a cancelled attempt within the preemption grace; far past
# the longest grace the node is not answering, and its liveness (SUSPECT, DOWN) takes over.
STOP_CONFIRM_TIMEOUT_SECONDS = MAX_PREEMPTION_GRACE_SECONDS + 600


def scheduler_config_get() -> SchedulerConfig:
    """The settings row, created with the defaults on first use."""
    config, _ = SchedulerConfig.objects.get_or_create(pk=1)
    return config


def scheduler_config_locked() -> SchedulerConfig:
    """The settings row, locked until the enclosing transaction ends (created first if
    missing: select_for_update cannot lock a row that is not there yet)."""
    scheduler_config_get()
    return SchedulerConfig.objects.select_for_update().get(pk=1)


def devices_stopping(*, now: datetime) -> set[int]:
    """Devices a cancelled or timed-out attempt may still be running on (Slurm's COMPLETING).

    The job let go of them, but until the node poll has stopped its process
    (`Allocation.released_at`) no new job may share the GPU with it. Bounded, so a node
    whose poll never answers does not hold its GPUs for ever; demo nodes free them at once.
    """
    return set(
        Allocation.objects.filter(
            ended_at__isnull=False,
            released_at__isnull=True,
            ended_at__gte=now - timedelta(seconds=STOP_CONFIRM_TIMEOUT_SECONDS),
            device__node__simulated=False,
        ).values_list("device_id", flat=True)
    )


def scheduler_settings_from(config: SchedulerConfig) -> SchedulerSettings:
    """The frozen settings a policy sees, from the stored row."""
    knob = config.promote_knob
    return SchedulerSettings(
        policy=config.policy,
        placement=PlacementKind(config.placement),
        queue_thresholds=tuple(float(value) for value in config.queue_thresholds),
        promote_knob=knob if knob else None,
        fairness=config.fairness,
        min_runtime=config.min_runtime_seconds,
        preempt_patience=config.preempt_patience_seconds,
        preempt_margin=config.preempt_margin,
        max_victims=config.max_victims,
        starvation_seconds=config.starvation_seconds,
        restore_cost=config.restore_cost_seconds,
        allox_alpha=config.allox_alpha,
        allox_window=config.allox_window,
        allox_efficiency_gate=config.allox_efficiency_gate,
    )


def round_is_due() -> bool:
    """True once the configured interval has passed since the last applied or failed round.

    A failed round counts: the timer retries it one interval later, not at every tick of
    beat (each failure is recorded, and a failure that repeats would flood the history).
    """
    interval = scheduler_config_get().round_interval_seconds
    last = (
        SchedulingRound.objects.filter(outcome__in=(RoundOutcome.APPLIED, RoundOutcome.FAILED))
        .order_by("-started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    return last is None or (timezone.now() - last).total_seconds() >= interval


def scheduling_round_list(*, limit: int = 100) -> QuerySet[SchedulingRound]:
    return SchedulingRound.objects.order_by("-started_at", "-id")[:limit]


# Forecasts are scored on their first estimate of jobs that started within this window,
# and only where that estimate said a wait of at least ACCURACY_MIN_WAIT (a start "now"
# that came a minute later is no test); a range is shown from ACCURACY_MIN_SAMPLES on.
ACCURACY_WINDOW = timedelta(days=30)
ACCURACY_MIN_WAIT_SECONDS = 300.0
ACCURACY_MIN_SAMPLES = 20


@dataclass(frozen=True)
class ForecastAccuracy:
    """How forecasts made at submission compared with what happened, as the ratio of the
    real wait to the forecast one: 0.8 = started after 80 % of the wait it was told."""

    samples: int
    low: float  # 10th percentile of the ratio
    median: float
    high: float  # 90th percentile


def start_forecast_accuracy(*, now: datetime) -> ForecastAccuracy | None:
    """The accuracy of first forecasts over the last ACCURACY_WINDOW; None until there
    are ACCURACY_MIN_SAMPLES of them."""
    ratios = []
    for made, predicted, started in StartForecast.objects.filter(
        first_made_at__gte=now - ACCURACY_WINDOW,
        first_start_at__isnull=False,
        # A job that first started before its first forecast (it started within a minute,
        # then was preempted or requeued and waited again) tells nothing about one.
        job__first_started_at__gt=F("first_made_at"),
    ).values_list("first_made_at", "first_start_at", "job__first_started_at"):
        forecast_wait = (predicted - made).total_seconds()
        if forecast_wait >= ACCURACY_MIN_WAIT_SECONDS:
            ratios.append((started - made).total_seconds() / forecast_wait)
    if len(ratios) < ACCURACY_MIN_SAMPLES:
        return None
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return ForecastAccuracy(
        samples=len(ratios), low=deciles[0], median=statistics.median(ratios), high=deciles[-1]
    )


def start_forecast_score() -> StartForecastScore | None:
    """The accuracy the last forecast run measured (`start_forecast_accuracy`), if any."""
    return StartForecastScore.objects.filter(pk=1).first()


def start_forecast_of(job: Job) -> StartForecast | None:
    """A pending job's stored forecast, or None: read with the job where it was fetched
    with `select_related("start_forecast")` (`jobs.selectors.job_visible_to` does). One
    made before the job's current wait began (it was requeued since) is stale: None."""
    if job.state != JobState.PENDING:
        return None
    try:
        forecast = job.start_forecast
    except StartForecast.DoesNotExist:
        return None
    if job.pending_since is not None and forecast.made_at < job.pending_since:
        return None
    return forecast
