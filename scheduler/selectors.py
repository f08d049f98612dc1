"""Reads of the scheduler's stored settings and round history."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from jobs.models import Allocation
from scheduler.core.types import PlacementKind, SchedulerSettings

from .choices import RoundOutcome
from .models import MAX_PREEMPTION_GRACE_SECONDS, SchedulerConfig, SchedulingRound

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
