"""Guaranteed GPUs per lab group, on top of the Tiresias round (Kueue's nominal quota).

Fair share alone gives a group its share only over time: a group that arrives at 9 am to a
cluster another group filled at 6 am waits for completions, or for LAS to demote the
incumbents (kueue#1714). A guarantee is the floor Kueue, Volcano and Run:ai offer: a group
with `guaranteed_gpus` G gets up to G GPUs back whenever its jobs wait, by preempting jobs
that run beyond their own group's guarantee. What it runs beyond G is borrowed: allowed
while others leave GPUs idle (up to its `max_gpus`), and reclaimable.

Which jobs a guarantee covers (`guarantee_cover`), per group with a guarantee:
1. GPUs its stopping jobs still hold count first (they are in use until they exit).
2. Its running jobs, best first in the round's order, while they fit in what is left: a
   group holding no more than its guarantee has every running job covered.
3. Then its pending jobs, best first, while they fit (a job too big for what is left is
   skipped, the ones behind it may still fit: backfill inside the guarantee).

How the round honours the cover (`decide_tiresias`):
- Covered jobs go first in the order, each tier in the round's own order, so a covered
  waiting job meets the uncovered running jobs before they are passed as "keep running".
- Covered running jobs are never preempted: their preemption class is below every waiting
  job's. This includes the group's own newer jobs, as Kueue's default
  (`withinClusterQueue: Never`): a group at its guarantee competes for more by borrowing.
- A covered waiting job may preempt any uncovered running job past its minimum runtime, at
  once (no patience, no queue margin, no victim cap: a guarantee that waits for LAS's
  churn control is no guarantee), taking the widest victims first, as a starving job does.
- AlloX's window step keeps the covered jobs' starts (it may not hand them to others).
Groups without a guarantee, and jobs without a group, are never covered: with no
guarantee set anywhere the round is exactly the plain Tiresias round.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.types import Job, JobPhase, Snapshot

# Preemption class of covered jobs: below every other class (queues are >= 0), so a covered
# running job is nobody's victim and a covered waiting job may claim any uncovered one.
COVERED_CLASS = -1


def guarantee_cover(snapshot: Snapshot, ordered: Sequence[Job]) -> frozenset[int]:
    """The ids of the jobs their group's guarantee covers this round (module docstring)."""
    left = {group.name: group.guaranteed_gpus for group in snapshot.groups}
    left = {name: gpus for name, gpus in left.items() if gpus > 0}
    if not left:
        return frozenset()
    for stopping in snapshot.stopping_jobs:
        if stopping.group in left:
            left[stopping.group] -= len(stopping.devices)
    covered: set[int] = set()
    for phase in (JobPhase.RUNNING, JobPhase.PENDING):
        for job in ordered:
            group = job.group
            if job.phase is phase and group in left and job.num_gpus <= left[group]:
                covered.add(job.id)
                left[group] -= job.num_gpus
    return frozenset(covered)


def covered_first(ordered: Sequence[Job], covered: frozenset[int]) -> list[Job]:
    """`ordered` with the covered jobs first; each tier keeps its order."""
    if not covered:
        return list(ordered)
    return [job for job in ordered if job.id in covered] + [
        job for job in ordered if job.id not in covered
    ]


def reclaim_reason(victim: Job, by: Job, guaranteed: int) -> str:
    """Why `victim` is preempted for a covered job."""
    borrower = f"group {victim.group}" if victim.group is not None else "its owner"
    return (
        f"job {by.id} of group {by.group} is inside its group's guarantee of {guaranteed} "
        f"GPUs and needs its devices; this job runs beyond what {borrower} is guaranteed"
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
        and job.preemptible
        and job.started_at is not None
        and job.started_at + min_runtime > now
    ]
    return min(ends) if ends else None
