"""Guaranteed GPUs per lab group, on top of the Tiresias round (Kueue's nominal quota).

Fair share alone gives a group its share only over time: a group that arrives at 9 am to a
cluster another group filled at 6 am waits for completions, or for LAS to demote the
incumbents (kueue#1714). A guarantee is the floor Kueue, Volcano and Run:ai offer: a group
with `guaranteed_gpus` G gets up to G GPUs back whenever its jobs wait, by preempting jobs
that run beyond their own group's guarantee. What it runs beyond G is borrowed: allowed
while others leave GPUs idle (up to its `max_gpus`), and reclaimable.

Which jobs a guarantee covers (`guarantee_cover`), per group with a guarantee:
1. Running jobs: GPUs the group runs beyond its guarantee are borrowed, and the borrowed
   jobs are its lowest in the round's order whose GPUs fit in that excess; the others are
   covered. A group holding no more than its guarantee has every running job covered,
   and reclaiming never takes a group below its guarantee. Stopping jobs' GPUs are being
   given back already: they expose no other job.
2. Then its pending jobs, best first, in what is left of the guarantee once its running
   and stopping jobs are counted; a job too big for what is left, or one that could not
   start anyway (over a quota, too big for any node it accepts), is skipped and the ones
   behind it may still fit.

How the round honours the cover (`decide_tiresias`):
- Covered jobs go first in the order, each tier in the round's own order, so a covered
  waiting job meets the uncovered running jobs before they are passed as "keep running".
- Covered running jobs are never preempted: their preemption class is below every waiting
  job's. This includes the group's own newer jobs, as Kueue's default
  (`withinClusterQueue: Never`): a group at its guarantee competes for more by borrowing.
- A covered waiting job may preempt any uncovered running job past its minimum runtime, at
  once (no patience, no queue margin, no victim cap: a guarantee that waits for LAS's
  churn control is no guarantee), the lowest in the order first; the efficiency gate does
  not narrow it, and the starvation guard's reservation does not hold it back. While
  jobs preempted for it checkpoint, it claims no more (`incoming_gpus`; a starving job
  neither).
- AlloX's window step keeps the covered jobs' starts (it may not hand them to others).
- A job that is not preemptible but reclaimable (an interactive session) is never
  preempted by LAS, moved or evicted; beyond its group's guarantee a covered waiting job
  may still take its GPUs (`reclaimable_for_the_pass`), as Run:ai lets interactive work
  be non-preemptible only within its project's quota.
Groups without a guarantee, and jobs without a group, are never covered: with no
guarantee set anywhere the round is the plain Tiresias round (where, too, a job whose
victims still checkpoint claims no more).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

from scheduler.core.types import Decisions, Job, Snapshot
from scheduler.policies.allox import free_after
from scheduler.policies.fairness import QuotaLedger
from scheduler.policies.placement import type_room

# Preemption class of covered jobs: below every other class (queues are >= 0), so a covered
# running job is nobody's victim and a covered waiting job may claim any uncovered one.
COVERED_CLASS = -1
# What every reclaim's reason says (tests tell reclaims from LAS preemptions by it).
RECLAIM_PHRASE = "takes back GPUs its group is guaranteed"


def guarantee_cover(snapshot: Snapshot, ordered: Sequence[Job]) -> frozenset[int]:
    """The ids of the jobs their group's guarantee covers this round (module docstring)."""
    guarantee = {group.name: group.guaranteed_gpus for group in snapshot.groups}
    guarantee = {name: gpus for name, gpus in guarantee.items() if gpus > 0}
    if not guarantee:
        return frozenset()
    covered: set[int] = set()
    # 1. Running jobs: what a group runs beyond its guarantee is borrowed (reclaimable),
    #    the rest covered (`_borrowed`). So reclaiming never takes a group below its
    #    guarantee, and GPUs already being given back (stopping jobs) are not borrowed any
    #    more: they do not expose another job.
    running: dict[str, list[Job]] = defaultdict(list)
    for job in ordered:
        if job.is_running and job.group in guarantee:
            running[job.group].append(job)
    running_gpus = {name: sum(job.num_gpus for job in running[name]) for name in guarantee}
    for name, jobs in running.items():
        borrowed = _borrowed(jobs, running_gpus[name] - guarantee[name])
        covered.update(job.id for job in jobs if job.id not in borrowed)
    # 2. Waiting jobs, best first, in what is left once running and stopping jobs are
    #    counted; a job that cannot start (over a quota, counting the jobs covered before
    #    it, or too big for any node it accepts) is skipped rather than allowed to use up
    #    the guarantee.
    left = {name: gpus - running_gpus[name] for name, gpus in guarantee.items()}
    for stopping in snapshot.stopping_jobs:
        if stopping.group in left:
            left[stopping.group] -= len(stopping.devices)
    runnable = _runnable(snapshot, ordered)
    for job in ordered:
        group = job.group
        if job.is_running or group not in left or job.num_gpus > left[group]:
            continue
        if runnable(job):
            covered.add(job.id)
            left[group] -= job.num_gpus
    return frozenset(covered)


def _borrowed(jobs: Sequence[Job], excess: int) -> set[int]:
    """Which of a group's running jobs (`jobs`, best first) are borrowed: a set whose GPUs
    add up to as much of `excess` as any set can (never more: the group keeps its
    guarantee), found by subset sum over GPU counts. Of the sets of that size it keeps the
    first found going through batch jobs before sessions (a session's memory is lost when
    it stops, a batch job checkpoints), each kind lowest-ranked first.

    Greedy lowest-first would miss sets: a group 4 over with 2-, 2- and 3-GPU jobs (the
    3 lowest) would lend nothing back but the 3.
    """
    if excess <= 0:
        return set()
    # Lowest first, batch jobs before sessions: the first way found to a sum is kept, so
    # the preferred jobs make it up.
    candidates = sorted(reversed(jobs), key=lambda job: not job.preemptible and job.reclaimable)
    reachable: dict[int, tuple[int, ...]] = {0: ()}
    for index, job in enumerate(candidates):
        for total, chosen in list(reachable.items()):
            new_total = total + job.num_gpus
            if new_total <= excess and new_total not in reachable:
                reachable[new_total] = (*chosen, index)
        if excess in reachable:
            break
    return {candidates[index].id for index in reachable[max(reachable)]}


def _runnable(snapshot: Snapshot, ordered: Sequence[Job]) -> Callable[[Job], bool]:
    """Whether a waiting job could start if room were made: no quota of its owner or group
    blocks it, and some schedulable node (or the cluster, unless it needs one node) has
    enough GPUs of a type it accepts."""
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    schedulable = [d for d in snapshot.devices if d.schedulable and node_ok.get(d.node, True)]
    holds = type_room(schedulable)
    all_types = tuple(sorted({device.device_type for device in schedulable}))
    ledger = QuotaLedger(snapshot, [job for job in ordered if job.is_running])

    def runnable(job: Job) -> bool:
        """Also charges a runnable job to its owner's and group's quotas, so the next
        job of the same owner is judged with it counted."""
        types = job.accepted_types or all_types
        if not any(holds(job, t) for t in types):
            return False
        if ledger.has_limits and ledger.is_limited(job):
            allowed, block = ledger.allowed_types(job, types)
            if block is not None:
                return False
            ledger.charge(job, {allowed[0]: job.num_gpus})
        return True

    return runnable


def incoming_gpus(snapshot: Snapshot) -> dict[int, int]:
    """Per waiting job, the GPUs of jobs preempted for it that are still checkpointing:
    they are its once they let go, so it claims no more victims meanwhile (otherwise each
    round of the grace period would take yet another job for the same start)."""
    incoming: dict[int, int] = defaultdict(int)
    for stopping in snapshot.stopping_jobs:
        if stopping.for_job is not None:
            incoming[stopping.for_job] += len(stopping.devices)
    return incoming


def served_by_incoming(snapshot: Snapshot, incoming: dict[int, int]) -> frozenset[int]:
    """Waiting jobs that GPUs on their way (`incoming`) and the free GPUs of types they
    accept would start: they claim no more victims this round (a job short of that may
    still claim the rest)."""
    if not incoming:
        return frozenset()
    free: dict[str, int] = defaultdict(int)
    for device in free_after(snapshot, Decisions()):  # free before this round decides
        free[device.device_type] += 1
    jobs = snapshot.job_by_id
    served = set()
    for job_id, gpus in incoming.items():
        job = jobs.get(job_id)
        if job is None or job.is_running:
            continue  # the claimant left (cancelled) or started: nothing to wait for
        types = job.accepted_types or tuple(free)
        if gpus + sum(free[t] for t in types if t in free) >= job.num_gpus:
            served.add(job_id)
    return frozenset(served)


def covered_first(ordered: Sequence[Job], covered: frozenset[int]) -> list[Job]:
    """`ordered` with the covered jobs first; each tier keeps its order."""
    if not covered:
        return list(ordered)
    return [job for job in ordered if job.id in covered] + [
        job for job in ordered if job.id not in covered
    ]


def reclaimable_for_the_pass(
    snapshot: Snapshot, ordered: Sequence[Job], covered: frozenset[int], classes: dict[int, int]
) -> tuple[Snapshot, list[Job]]:
    """The snapshot and order the pass sees: a running reclaimable job (a session) that no
    guarantee covers becomes a victim for covered waiting jobs only.

    It is marked preemptible for the pass alone, ranked first among the uncovered jobs
    (the last victim chosen), with class 0: every waiting job's class
    but a covered one's (-1) is 0 or more, and a victim's must be strictly greater, so LAS
    never takes it. The steps after the pass (AlloX's moves and evictions) see the real
    snapshot, where it is not preemptible. Unchanged when no waiting job is covered.
    """
    jobs = snapshot.job_by_id
    if not any(not jobs[job_id].is_running for job_id in covered):
        return snapshot, list(ordered)
    opened = {
        job.id: replace(job, preemptible=True)
        for job in ordered
        if job.is_running and not job.preemptible and job.reclaimable and job.id not in covered
    }
    if not opened:
        return snapshot, list(ordered)
    classes.update(dict.fromkeys(opened, 0))
    jobs_for_pass = tuple(opened.get(job.id, job) for job in snapshot.jobs)
    # Right behind the covered jobs: still after the covered waiting jobs (a victim must
    # not have been walked yet), but ranked above every other running job, so victims
    # (taken lowest first) are batch jobs, which checkpoint, before sessions, which do not.
    order = [job for job in ordered if job.id in covered]
    order += [opened[job.id] for job in ordered if job.id in opened]
    order += [job for job in ordered if job.id not in covered and job.id not in opened]
    return replace(snapshot, jobs=jobs_for_pass), order


def reclaim_reason(victim: Job, by: Job) -> str:
    """Why `victim` is preempted for a covered job (the claimant's guarantee, a number only
    admins and its members see, is not told)."""
    borrower = f"group {victim.group}" if victim.group is not None else "its owner"
    return (
        f"job {by.id} of group {by.group} {RECLAIM_PHRASE}; this job runs beyond what "
        f"{borrower} is guaranteed"
    )


def next_reclaim(
    snapshot: Snapshot, held_covered: Sequence[Job], covered: frozenset[int]
) -> float | None:
    """When a held covered job may next find a victim: the earliest end of an uncovered
    running job's minimum runtime (a round then, not at the next completion)."""
    if not held_covered:
        return None
    now = snapshot.now
    min_runtime = snapshot.settings.min_runtime
    ends = [
        job.started_at + min_runtime
        for job in snapshot.jobs
        if job.is_running
        and job.id not in covered
        and (job.preemptible or job.reclaimable)
        and job.started_at is not None
        and job.started_at + min_runtime > now
    ]
    return min(ends) if ends else None
