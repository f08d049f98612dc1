"""SRTF and SRSF with perfect knowledge (algorithms.md §5): the simulator's lower bounds.

Only the simulator sets `Job.total_work` (normalized GPU-seconds); a job without it is
treated as infinitely long (ordered last, by submit time).

- remaining service R = max(total_work - attained_service, 0), in normalized GPU-seconds;
- SRTF ranks by remaining time R / num_gpus: the seconds left when the job runs on
  `num_gpus` reference-speed devices;
- SRSF ranks by remaining service R = remaining time x GPUs (Tiresias' SRSF baseline): a
  wide job is charged for every GPU it keeps busy.

Both are preemptive: a job preempts any running job behind it in the order (past its
minimum runtime), whatever the gap. Ties by submit time, then id.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core.types import Decisions, Job, Snapshot
from scheduler.policies.base import run_pass


def remaining_service(job: Job) -> float:
    if job.total_work is None:
        return float("inf")
    return max(job.total_work - job.attained_service, 0.0)


def remaining_time(job: Job) -> float:
    return remaining_service(job) / max(job.num_gpus, 1)


def _decide_shortest_remaining(snapshot: Snapshot, size: Callable[[Job], float]) -> Decisions:
    """Steps:
    1. Order by `size` (smallest first), then submit time, then id.
    2. The pass with running jobs one preemption class below pending ones: every pending
       job may preempt any unprotected running job that comes after it in the order.
    """
    ordered = sorted(snapshot.jobs, key=lambda job: (size(job), job.submit_time, job.id))
    # Running jobs one class below every pending job: the pass lets a pending job take only
    # running jobs it has not walked past yet, i.e. those later in this order.
    preemption_class = {job.id: 1 if job.is_running else 0 for job in ordered}

    def reason(victim: Job, by: Job) -> str:
        return f"job {by.id} has less remaining work ({size(by):.0f} vs {size(victim):.0f})"

    return run_pass(snapshot, ordered, preemption_class=preemption_class, preempt_reason=reason)


def decide_srtf(snapshot: Snapshot) -> Decisions:
    """Shortest remaining time first: remaining service / num_gpus."""
    return _decide_shortest_remaining(snapshot, remaining_time)


def decide_srsf(snapshot: Snapshot) -> Decisions:
    """Shortest remaining service first: remaining time x GPUs."""
    return _decide_shortest_remaining(snapshot, remaining_service)
