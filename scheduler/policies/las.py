"""Tiresias discretized 2D-LAS (NSDI'19), with gpulab's fair share (algorithms.md §1, §2).

Information-agnostic: jobs are ranked by the service they have attained, discretized into
K queues by `queue_thresholds`; within a queue, fair share then FIFO by queue entry time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.core.accounting import queue_level_for
from scheduler.core.types import (
    Decisions,
    Hold,
    Job,
    JobPhase,
    Preempt,
    QueueChange,
    Reason,
    ReasonCode,
    Snapshot,
)
from scheduler.policies.allox import (
    allox_rematch,
    efficiency_gate,
    evict_inefficient,
    explain_narrowing,
    fill_idle_devices,
    free_after,
)
from scheduler.policies.base import run_pass
from scheduler.policies.fairness import fair_share_order, normalized_usage
from scheduler.policies.guarantees import (
    COVERED_CLASS,
    covered_first,
    guarantee_cover,
    incoming_gpus,
    next_reclaim,
    reclaim_reason,
    reclaimable_for_the_pass,
    served_by_incoming,
)
from scheduler.policies.placement import (
    FreeCounts,
    candidate_types,
    choose_pools,
    device_type_order,
)

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
            at = crossed_at(job, level, thresholds, snapshot)
            changes.append(QueueChange(job.id, level, entered_at=at))
            levels[job.id], entered_at[job.id] = level, now if at is None else at
        else:
            levels[job.id], entered_at[job.id] = level, job.queue_entered_at
    return TiresiasQueues(levels, entered_at, tuple(changes))


def crossed_at(
    job: Job, level: int, thresholds: Sequence[float], snapshot: Snapshot
) -> float | None:
    """When a running job's queue key crossed into `level` from below (demotion while it
    runs), from the rate it gains service at: the devices' speed sum. None otherwise (a
    pending job's key does not move; it enters its new queue now)."""
    if not job.is_running or level <= job.queue_level or level == 0:
        return None
    devices = snapshot.device_by_id
    rate = sum(devices[d].speed if d in devices else 1.0 for d in job.devices)
    if rate <= 0:
        return None
    crossed = snapshot.now - (job.service_since_promotion - thresholds[level - 1]) / rate
    started = job.started_at if job.started_at is not None else snapshot.now
    return min(max(crossed, started), snapshot.now)


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


def las_reason(victim: Job, by: Job, levels: Mapping[int, int]) -> str:
    return (
        f"job {by.id} in queue {levels[by.id]} needs its devices; this job has attained more "
        f"service (queue {levels[victim.id]})"
    )


# Preemption class of a pending job that may not preempt this round (patience not yet
# served): larger than any queue index, so no running job's class is strictly greater.
NO_PREEMPTION = 1 << 30


def spell_start(job: Job) -> float:
    """When the current pending spell began (submission when no start time is recorded)."""
    return job.pending_since if job.pending_since is not None else job.submit_time


def pending_for(job: Job, now: float) -> float:
    """Seconds in the current pending spell."""
    return max(now - spell_start(job), 0.0)


def starving_jobs(snapshot: Snapshot) -> frozenset[int]:
    """Pending jobs the starvation guard protects this round: multi-GPU jobs that have
    waited `starvation_seconds` in one pending spell.

    Only a job that needs several devices at once can be passed over for ever by backfill:
    devices free one at a time and each goes to a job that fits. A single-GPU job gets the
    next device of its type in priority order, and the knob promotes it once it has waited
    long against its run time. Exempting single-GPU jobs too turned the guard into churn
    among long jobs on Gavel's cell at 5.6 jobs/h (1,137 window preemptions and 23.5 h
    against 592 and 22.3 h without it; bench/README-gavel.md) and moved the contended
    Philly-like traces by at most 3.2 % (bench/tiresias_compare.py, seed 1: wait -1.2 %,
    preemptions -3.2 %, 16-GPU JCT +2.4 %).

    The knob alone cannot protect a wide job that never ran (Tiresias only promotes jobs
    that have run), and a promoted job only reaches the tail of queue 0. Promoted jobs are
    not starving by themselves: exempting them too lets promoted jobs and their victims
    take turns (60-job trace x 10 on 8 GPUs: 43 preemptions and 13.4 ks average JCT,
    against 39 and 12.7 ks; with queues from 100 GPU-s it was 275 against 230).
    """
    limit = snapshot.settings.starvation_seconds
    if limit <= 0:
        return frozenset()
    cutoff = snapshot.now - limit
    pending = JobPhase.PENDING
    return frozenset(
        job.id
        for job in snapshot.jobs
        if job.phase is pending and job.num_gpus > 1 and spell_start(job) <= cutoff
    )


def preemption_classes(
    snapshot: Snapshot, levels: Mapping[int, int], starving: frozenset[int] = frozenset()
) -> dict[int, int]:
    """Who may preempt whom: a pending job preempts a running job of a strictly greater
    class. Running jobs' class is their queue. A pending job's class is NO_PREEMPTION until
    it has waited `preempt_patience` seconds in this pending spell; then its queue +
    `preempt_margin` - 1 (margin 1 = Tiresias: any lower queue). A starving job's class is
    its queue at once (the margin keeps jobs of similar service from trading places; a
    starving job has waited long enough to claim Tiresias' plain rule)."""
    settings = snapshot.settings
    margin = max(settings.preempt_margin, 1) - 1
    patience = settings.preempt_patience
    # Patience served <=> the pending spell began at or before `served_by` (no waiting
    # needed when patience is 0).
    served_by = snapshot.now - patience if patience > 0 else float("inf")
    running = JobPhase.RUNNING
    classes: dict[int, int] = {}
    for job in snapshot.jobs:
        job_id = job.id
        level = levels[job_id]
        if job.phase is running or job_id in starving:
            # A starving job is exempt from patience and margin: it has waited long enough
            # for Tiresias' own rule (any lower queue).
            classes[job_id] = level
        elif spell_start(job) > served_by:
            classes[job_id] = NO_PREEMPTION
        else:
            classes[job_id] = level + margin
    return classes


def first_blocked_starving(
    snapshot: Snapshot, decisions: Decisions, starving: frozenset[int]
) -> int | None:
    """The first starving job in the order that the pass held for lack of capacity, if any.

    Read from the pass's decisions, before AlloX's window step: a job the pass could start
    but AlloX left for another (it loses less on those devices) did not lack capacity. Nor
    did a job that AlloX's placer held because it would rather wait for a faster type while
    a device it can run on stays free: keeping devices idle for it would only cost
    throughput (measured on Gavel's cell: 4-5 K80s idle under a queue).
    """
    if not starving:
        return None
    capacity_codes = (ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES)
    held_for_capacity = {h.job_id for h in decisions.holds if h.reason.code in capacity_codes}
    held = [
        job_id for job_id in decisions.order if job_id in starving and job_id in held_for_capacity
    ]
    if not held:
        return None
    free = _free_after(snapshot, decisions)
    order = device_type_order(snapshot.devices)
    jobs = snapshot.job_by_id
    for job_id in held:
        job = jobs[job_id]
        if choose_pools(job.num_gpus, candidate_types(job, order), job.consolidation, free) is None:
            return job_id
    return None


def _free_after(snapshot: Snapshot, decisions: Decisions) -> FreeCounts:
    """type -> node -> devices still free after `decisions` (`allox.free_after`)."""
    free: FreeCounts = {}
    for device in free_after(snapshot, decisions):
        nodes = free.setdefault(device.device_type, {})
        nodes[device.node] = nodes.get(device.node, 0) + 1
    return free


def reserve_for_starving(
    snapshot: Snapshot,
    decisions: Decisions,
    levels: Mapping[int, int],
    blocked: int | None,
    *,
    keep: frozenset[int] = frozenset(),
) -> Decisions:
    """The starvation guard's reservation: while the first starving job in the order is
    held for capacity (`blocked`), jobs of lower queues behind it do not start on devices
    of a type it accepts.

    Without it the devices a wide starving job needs are refilled by small jobs as they
    free up, and it waits for a moment when all of them are free at once (measured: 16-GPU
    jobs starve for days on a contended trace). Jobs in its own or higher queues still
    start: they are entitled to go first. A preemption made only for a start dropped here
    is dropped too (the victim keeps running).
    """
    if blocked is None or any(start.job_id == blocked for start in decisions.starts):
        return decisions
    position = {job_id: index for index, job_id in enumerate(decisions.order)}
    floor = levels[blocked] + 1
    # Only starts on devices the starving job could use are in its way: a start on a type
    # it does not accept (or was narrowed away from, `efficiency_gate`) keeps nothing from it.
    wanted = snapshot.job_by_id[blocked].accepted_types
    device_by_id = snapshot.device_by_id
    # A start inside its group's guarantee (`keep`) is never cut: the guarantee is the
    # group's whatever waits elsewhere.
    cut = {
        start.job_id
        for start in decisions.starts
        if start.job_id not in keep
        and position[start.job_id] > position[blocked]
        and levels[start.job_id] >= floor
        and (not wanted or any(device_by_id[d].device_type in wanted for d in start.device_ids))
    }
    if not cut:
        return decisions
    starts = tuple(start for start in decisions.starts if start.job_id not in cut)
    # Keep a preemption only if a remaining start uses its devices, credited to the first
    # such start in the order.
    user_of_device: dict[int, int] = {}
    for start in sorted(starts, key=lambda start: position[start.job_id]):
        for device_id in start.device_ids:
            user_of_device.setdefault(device_id, start.job_id)
    jobs = snapshot.job_by_id
    preemptions: list[Preempt] = []
    for preempt in decisions.preemptions:
        if preempt.by_job_id is None or preempt.by_job_id not in cut:
            preemptions.append(preempt)
            continue
        users = [user_of_device[d] for d in jobs[preempt.job_id].devices if d in user_of_device]
        if users:
            by = min(users, key=position.__getitem__)
            preemptions.append(replace(preempt, by_job_id=by))
    waited_hours = pending_for(jobs[blocked], snapshot.now) / 3600.0
    reserved = Reason(
        ReasonCode.RESERVED,
        f"devices are kept for job {blocked}, which has waited {waited_hours:.1f} h",
    )
    reasons = {hold.job_id: hold.reason for hold in decisions.holds}
    reasons.update(dict.fromkeys(cut, reserved))
    # A job of a lower queue the pass held for capacity may fit in what the cut frees, and
    # the reservation is then what keeps it out: its reason must say so, not "Behind".
    for hold in decisions.holds:
        job = jobs[hold.job_id]
        if (
            hold.reason.code in (ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES)
            and position[hold.job_id] > position[blocked]
            and levels[hold.job_id] >= floor
            and (not wanted or not job.accepted_types or set(job.accepted_types) & set(wanted))
        ):
            reasons[hold.job_id] = reserved
    held = sorted(reasons, key=position.__getitem__)
    holds = tuple(Hold(job_id, reasons[job_id], place) for place, job_id in enumerate(held, 1))
    return replace(decisions, starts=starts, preemptions=tuple(preemptions), holds=holds)


def next_clock(snapshot: Snapshot, decisions: Decisions) -> float | None:
    """When a held job's patience or starvation clock runs out (Decisions.wake_at)."""
    settings = snapshot.settings
    now = snapshot.now
    jobs = snapshot.job_by_id
    # Every held job's spell start plus each clock that applies to it (the starvation
    # clock only to multi-GPU jobs, `starving_jobs`): the earliest moment still ahead.
    due: list[float] = []
    for hold in decisions.holds:
        job = jobs[hold.job_id]
        start = spell_start(job)
        clocks = [settings.preempt_patience]
        if job.num_gpus > 1:
            clocks.append(settings.starvation_seconds)
        due.extend(start + clock for clock in clocks if clock > 0 and start + clock > now)
    return min(due) if due else None


def decide_tiresias(snapshot: Snapshot, within_queue: WithinQueueKey) -> Decisions:
    """The Tiresias round shared by LAS and Gittins.

    Steps:
    0. With AlloX placement and a queue, the efficiency gate (`allox.efficiency_gate`)
       narrows each waiting job to the device types where it does the most for the queue.
    1. Queue levels after demotion and promotion (`tiresias_queues`).
    2. Priority order (`tiresias_order`).
    2b. Jobs inside their group's guarantee first (`guarantees.guarantee_cover`).
    3. The pass. Tiresias lets a job preempt any job of a lower queue at once; gpulab adds
       churn control (`preemption_classes`: patience and a queue margin; `max_victims`)
       and the starvation guard (`starving_jobs`: no victim limit, widest victims first).
       A covered running job is nobody's victim; a covered waiting job reclaims its
       group's guarantee from uncovered running jobs at once, like a starving job.
    4. With AlloX placement, `allox_rematch`: AlloX chooses among a window of waiting jobs
       who gets the free devices, and moves running jobs to faster free devices. Then,
       while the gate is active, `evict_inefficient`: a waiting job takes the device of a
       running job that makes much less of its type than the waiting job would, if the
       pass's rule lets it preempt that job (a lower queue, patience served); and
       `fill_idle_devices`: devices no waiting job was narrowed to are lent to waiting
       jobs that run there well enough, until an eviction takes them back.
    5. The starvation guard's reservation (`reserve_for_starving`) for the first starving
       job the pass held for lack of room.
    6. Hold reasons name the gate where it narrowed a job's types (`explain_narrowing`).
    7. `wake_at`: when a held job's patience or starvation clock runs out, or a held
       covered job's possible victim leaves its minimum runtime.
    """
    original = snapshot
    # Queues, order and the guarantees' cover do not depend on accepted types, so they are
    # read before the gate, which then leaves covered waiting jobs alone: narrowed to a
    # type only covered jobs hold, a job would wait beside borrowers it may reclaim.
    queues = tiresias_queues(original)
    ordered = tiresias_order(original, queues, within_queue)
    covered = guarantee_cover(original, ordered)
    covered_waiting = frozenset(
        job_id for job_id in covered if not original.job_by_id[job_id].is_running
    )
    gate = efficiency_gate(original, exempt=covered_waiting)
    snapshot = gate.snapshot
    jobs = snapshot.job_by_id
    if snapshot is not original:  # the gate narrowed jobs: the order holds its copies
        ordered = [jobs[job.id] for job in ordered]
    ordered = covered_first(ordered, covered)
    levels = queues.levels
    # Jobs whose victims are still checkpointing claim no more (`incoming_gpus`), when
    # those GPUs and the free ones they accept are enough for them.
    served = served_by_incoming(snapshot, incoming_gpus(snapshot))
    starving = starving_jobs(snapshot) - served
    now = snapshot.now

    def reason(victim: Job, by: Job) -> str:
        if by.id in covered:
            return reclaim_reason(victim, by)
        if by.id in starving:
            return (
                f"job {by.id} has waited {pending_for(by, now) / 3600.0:.1f} h and needs its "
                "devices (starvation guard)"
            )
        return las_reason(victim, by, levels)

    classes = preemption_classes(snapshot, levels, starving)
    classes.update(dict.fromkeys(covered, COVERED_CLASS))
    classes.update(dict.fromkeys(served, NO_PREEMPTION))
    pass_snapshot, pass_order = reclaimable_for_the_pass(
        snapshot, ordered, covered - served, classes
    )
    decisions = run_pass(
        pass_snapshot,
        pass_order,
        preemption_class=classes,
        levels=levels,
        queue_changes=queues.changes,
        preempt_reason=reason,
        max_victims=snapshot.settings.max_victims,
        starving=starving,
        # A job taking back its group's guarantee is not held to the victim cap.
        uncapped=covered_waiting,
    )
    blocked = first_blocked_starving(snapshot, decisions, starving)
    decisions = allox_rematch(snapshot, decisions, keep=covered_waiting)
    decisions = evict_inefficient(gate, decisions, classes)
    decisions = fill_idle_devices(original, gate, decisions)
    decisions = reserve_for_starving(snapshot, decisions, levels, blocked, keep=covered)
    decisions = explain_narrowing(original, snapshot, decisions)
    held_covered = [jobs[hold.job_id] for hold in decisions.holds if hold.job_id in covered]
    wakes = [
        moment
        for moment in (
            next_clock(snapshot, decisions),
            next_reclaim(snapshot, held_covered, covered),
        )
        if moment is not None
    ]
    return replace(decisions, wake_at=min(wakes) if wakes else None)


def decide_las(snapshot: Snapshot) -> Decisions:
    """2D-LAS: Tiresias queues, FIFO by queue entry time inside each queue."""
    return decide_tiresias(snapshot, fifo_within_queue)
