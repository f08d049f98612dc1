"""Tiresias discretized 2D-LAS (NSDI'19), with gpulab's fair share (algorithms.md §1, §2).

Information-agnostic: jobs are ranked by the service they have attained, discretized into
K queues by `queue_thresholds`; within a queue, fair share then FIFO by queue entry time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.core.accounting import queue_level_for
from scheduler.core.types import Decisions, Job, QueueChange, Snapshot
from scheduler.policies.allox import allox_rematch
from scheduler.policies.base import run_pass
from scheduler.policies.fairness import fair_share_order, normalized_usage

# Within-queue order: a sort key per job (smaller first); LAS uses queue entry time.
WithinQueueKey = Callable[[Sequence[Job], "TiresiasQueues"], list[tuple[float, ...]]]


@dataclass(frozen=True, slots=True)
class TiresiasQueues:
    """Queue state after this round's demotions and promotions."""

    levels: dict[int, int]  # job id -> queue index (0 = highest priority)
    entered_at: dict[int, float]  # job id -> time it entered that queue (FIFO key)
    changes: tuple[QueueChange, ...]


def tiresias_queues(snapshot: Snapshot) -> TiresiasQueues:
    """Each job's queue this round, and the `QueueChange`s that get it there.

    Steps:
    1. The level is a pure function of the queue key `service_since_promotion` (normalized
       GPU-seconds since the last promotion): queue i holds [Q_i, Q_{i+1}). A job whose
       key crossed its queue's upper threshold moves to the tail of the next queue
       (the reference simulator demotes on `executed_time x num_gpu` the same way).
    2. Starvation (PROMOTEKNOB / STARVELIMIT): a pending job below queue 0 that has run
       (executed t > 0) and has waited δ >= knob x t since its last promotion moves to the
       tail of queue 0; the apply step resets δ, t and the key. As in the reference
       simulators, only jobs below queue 0 are promoted: "promoting" a queue-0 job would
       move it to the tail of its own queue, a demotion in all but name.
    3. A moved job is ordered at the tail of its new queue this round already
       (`entered_at = now`), exactly where the apply step will put it.
    """
    settings = snapshot.settings
    thresholds = settings.queue_thresholds
    knob = settings.promote_knob or 0.0
    now = snapshot.now
    levels: dict[int, int] = {}
    entered_at: dict[int, float] = {}
    changes: list[QueueChange] = []
    for job in snapshot.jobs:
        # Derived from the key every round rather than trusted from the stored level, so an
        # admin changing the thresholds re-sorts everyone at the next round.
        level = queue_level_for(job.service_since_promotion, thresholds)
        executed = job.executed_since_promotion
        if (
            knob > 0
            and level > 0
            and not job.is_running
            and executed > 0
            and job.waiting_since_promotion >= knob * executed
        ):
            changes.append(QueueChange(job.id, 0, promoted=True))
            levels[job.id], entered_at[job.id] = 0, now
        elif level != job.queue_level:
            changes.append(QueueChange(job.id, level))
            levels[job.id], entered_at[job.id] = level, now
        else:
            levels[job.id], entered_at[job.id] = level, job.queue_entered_at
    return TiresiasQueues(levels, entered_at, tuple(changes))


def fifo_within_queue(jobs: Sequence[Job], queues: TiresiasQueues) -> list[tuple[float, ...]]:
    """2D-LAS: first come (into this queue), first served; ties by job id."""
    entered_at = queues.entered_at
    return [(entered_at[job.id], job.id) for job in jobs]


def tiresias_order(
    snapshot: Snapshot, queues: TiresiasQueues, within_queue: WithinQueueKey
) -> list[Job]:
    """All active jobs best first: queue 0 first; inside a queue, fair share blended with
    `within_queue` (see `fair_share_order`)."""
    by_level: dict[int, list[Job]] = {}
    for job in snapshot.jobs:
        by_level.setdefault(queues.levels[job.id], []).append(job)
    usage_norm = normalized_usage(snapshot, snapshot.jobs)
    ordered: list[Job] = []
    for level in sorted(by_level):
        jobs = by_level[level]
        keys = within_queue(jobs, queues)
        in_queue = [jobs[i] for i in sorted(range(len(jobs)), key=keys.__getitem__)]
        ordered.extend(fair_share_order(in_queue, usage_norm, snapshot.settings.fairness))
    return ordered


def las_reason(victim: Job, by: Job, levels: dict[int, int]) -> str:
    return (
        f"job {by.id} in queue {levels[by.id]} needs its devices; this job has attained more "
        f"service (queue {levels[victim.id]})"
    )


def decide_tiresias(snapshot: Snapshot, within_queue: WithinQueueKey) -> Decisions:
    """The Tiresias round shared by LAS and Gittins.

    Steps:
    1. Queue levels after demotion and promotion (`tiresias_queues`).
    2. Priority order (`tiresias_order`).
    3. The pass with preemption class = queue level: a job only preempts jobs in
       lower-priority queues ("jobs in the same queue do not preempt each other").
    4. With AlloX placement, `allox_rematch`: AlloX chooses among a window of waiting jobs
       who gets the free devices, and moves running jobs to faster free devices.
    """
    queues = tiresias_queues(snapshot)
    ordered = tiresias_order(snapshot, queues, within_queue)
    levels = queues.levels
    # Preemption class = queue: Tiresias preempts only across queues, which bounds churn to
    # jobs that crossed a threshold (algorithms.md section 1).
    decisions = run_pass(
        snapshot,
        ordered,
        preemption_class=levels,
        levels=levels,
        queue_changes=queues.changes,
        preempt_reason=lambda victim, by: las_reason(victim, by, levels),
    )
    # 4. AlloX placement: the window step and moves (allox.allox_rematch; no-op otherwise).
    return allox_rematch(snapshot, decisions)


def decide_las(snapshot: Snapshot) -> Decisions:
    """2D-LAS: Tiresias queues, FIFO by queue entry time inside each queue."""
    return decide_tiresias(snapshot, fifo_within_queue)
