"""Advancing a job's Tiresias state and an account's usage over time.

Pure functions shared by the trace simulator and the live loop, so both count service the
same way. They return new frozen objects (`dataclasses.replace`), never mutate.

Units (algorithms.md §1):
- `dt`, times and the since-promotion clocks are wall seconds;
- service (`attained_service`, `service_since_promotion`) is normalized GPU-seconds: one
  second on a device of speed 2.0 counts 2.0, so a job on 4 reference GPUs gains 4 per second;
- usage is decayed normalized GPU-seconds (fair share, algorithms.md §2).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from scheduler.core.types import Device, Job, JobPhase, QueueChange

Moment = TypeVar("Moment", float, datetime)  # epoch seconds (policies) or a datetime (rows)


def speed_sum(job: Job, device_by_id: Mapping[int, Device]) -> float:
    """Σ relative speeds of the devices `job` holds: its normalized GPU-seconds per second.

    A device missing from `device_by_id` (removed while the job ran) counts at the
    reference speed 1.0 rather than 0, so a job never silently stops accruing service.
    """
    return sum(
        device_by_id[device_id].speed if device_id in device_by_id else 1.0
        for device_id in job.devices
    )


def held_rate(device_ids: Iterable[int], speed_of: Mapping[int, float]) -> float:
    """Normalized GPU-seconds per second on `device_ids`; a device without a known speed
    counts at 1.0 (as in `speed_sum`)."""
    return sum(speed_of.get(device_id, 1.0) for device_id in device_ids)


def live_service(
    device_ids: Iterable[int], since: float | None, now_s: float, speed_of: Mapping[int, float]
) -> float:
    """Normalized GPU-seconds of a run on `device_ids` since `since` (epoch seconds), not
    yet folded into its job's row."""
    if since is None:
        return 0.0
    return max(now_s - since, 0.0) * held_rate(device_ids, speed_of)


def advance_running(job: Job, dt: float, speed_sum: float) -> Job:
    """`job` after running `dt` wall seconds on devices whose speeds sum to `speed_sum`.

    attained_service and service_since_promotion grow by speed_sum x dt (normalized
    GPU-seconds); executed_since_promotion grows by dt (wall seconds), the reference
    simulator's `executed_time` that the starvation knob compares against.
    """
    if dt < 0:
        raise ValueError(f"dt must be >= 0, got {dt}")
    # Normalized by device speed (algorithms.md section 1): a job on fast devices climbs the
    # queues faster, as its real progress does.
    service = speed_sum * dt
    return replace(
        job,
        attained_service=job.attained_service + service,
        service_since_promotion=job.service_since_promotion + service,
        executed_since_promotion=job.executed_since_promotion + dt,
    )


def advance_pending(job: Job, dt: float) -> Job:
    """`job` after waiting `dt` wall seconds.

    waiting_since_promotion (the starvation knob's δ) grows by dt only once the job has run
    since its last promotion (executed_since_promotion > 0). This is the reference
    simulator's `last_pending_time` (SymbioticLab/Tiresias `run_sim.py`: "if not started
    yet, job is always in Q0 and no need to push_back"): the wait before a job's first run
    must not count, or a job that queued for hours before it first ran would be promoted
    straight back to queue 0 the first time it is demoted and preempted.
    """
    if dt < 0:
        raise ValueError(f"dt must be >= 0, got {dt}")
    if job.executed_since_promotion <= 0:
        return job
    return replace(job, waiting_since_promotion=job.waiting_since_promotion + dt)


def decay_usage(usage: float, dt: float, half_life: float) -> float:
    """Exponentially decayed usage after `dt` seconds: usage x 2^(-dt / half_life).

    Slurm's PriorityDecayHalfLife; algorithms.md §2 defaults the half-life to 7 days.
    A half-life <= 0 or infinite means no decay.
    """
    if dt < 0:
        raise ValueError(f"dt must be >= 0, got {dt}")
    # 0 and inf are the admin's two ways of saying "never forget": keep usage as is.
    if half_life <= 0 or math.isinf(half_life):
        return usage
    return usage * 0.5 ** (dt / half_life)


def decayed_service(rate: float, seconds: float, half_life: float) -> float:
    """Usage, as of the end of a run, of `seconds` at `rate` normalized GPU-seconds per second.

    Each GPU-second decays from the moment it was used (algorithms.md §2), so the run
    counts ∫₀ᵗ rate × 2^(−(t−τ)/H) dτ = rate × H/ln 2 × (1 − 2^(−t/H)) for t = `seconds` and
    H = `half_life`, not rate × t: a 14-day run at the 7-day half-life counts about 54 % of
    its service. The result is referenced to the end of the run, like an account's stored
    usage to its `usage_updated_at`. A half-life <= 0 or infinite means no decay.
    """
    if seconds < 0:
        raise ValueError(f"seconds must be >= 0, got {seconds}")
    if half_life <= 0 or math.isinf(half_life):
        return rate * seconds
    decay_rate = math.log(2.0) / half_life
    # -expm1(-x) = 1 - e^(-x), exact also for runs far shorter than the half-life.
    return rate * -math.expm1(-decay_rate * seconds) / decay_rate


def eligible_since(pending_since: Moment | None, retry_not_before: Moment | None) -> Moment | None:
    """When a pending job's current pending spell began, as far as waiting counts.

    A failed job retried after a backoff is PENDING from its failure (`pending_since`)
    but cannot start before `retry_not_before`; the backoff is the job's own penalty, not
    time the scheduler kept it waiting, so its spell (preemption patience, the starvation
    guard, the starvation knob's δ) starts when the backoff ends. The live loop's snapshot
    and its accounting fold (jobs.services) both measure waiting from here.
    """
    if pending_since is None or retry_not_before is None:
        return pending_since
    return max(pending_since, retry_not_before)


def queue_level_for(service_since_promotion: float, thresholds: Sequence[float]) -> int:
    """Tiresias queue index for a queue key: queue i holds service in [Q_i, Q_{i+1}).

    A job exactly at a threshold has crossed it (it moves to the next queue).
    """
    return bisect.bisect_right(thresholds, service_since_promotion)


def apply_queue_change(job: Job, change: QueueChange, now: float) -> Job:
    """What the apply step does with a `QueueChange` (see its docstring in core/types.py).

    The job enters the tail of `change.level` at `now`; a promotion also resets the
    since-promotion counters (δ and t in the paper, and the queue key) to zero.
    """
    if change.job_id != job.id:
        raise ValueError(f"queue change for job {change.job_id} applied to job {job.id}")
    entered_at = now if change.entered_at is None else change.entered_at
    if change.promoted:
        # As the live apply step does: the promotion also starts a new pending spell (the
        # live loop measures δ from `pending_since`).
        return replace(
            job,
            queue_level=change.level,
            queue_entered_at=entered_at,
            service_since_promotion=0.0,
            executed_since_promotion=0.0,
            waiting_since_promotion=0.0,
            pending_since=now if job.phase is JobPhase.PENDING else job.pending_since,
        )
    return replace(job, queue_level=change.level, queue_entered_at=entered_at)


def mark_started(job: Job, device_ids: tuple[int, ...], now: float) -> Job:
    """`job` once it holds `device_ids`: RUNNING since `now` (the minimum-runtime clock)."""
    return replace(
        job, phase=JobPhase.RUNNING, devices=device_ids, started_at=now, pending_since=None
    )


def mark_preempted(job: Job, now: float) -> Job:
    """`job` back in the queue after a preemption at `now`: PENDING, no devices, no run
    clock, and a new pending spell (the patience and starvation clocks start again)."""
    return replace(job, phase=JobPhase.PENDING, devices=(), started_at=None, pending_since=now)
