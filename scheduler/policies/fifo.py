"""FIFO baselines (algorithms.md §5): strict YARN-CS and FIFO with skip-ahead.

Both order every active job by submit time (ties by id) and never preempt.
- `fifo` is the Tiresias paper's YARN-CS baseline: the first job that does not fit blocks
  every job behind it (head-of-line blocking), even if smaller jobs would fit.
- `fifo-backfill` skips a job that does not fit and lets later ones start.

A job held for a quota or for a device type the cluster does not have does not block the
line in strict FIFO: it is not eligible to run at all (as YARN skips users over their
limit), and blocking on it would stall the cluster until an admin intervened.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.types import Decisions, Job, SchedulerSettings, Snapshot
from scheduler.policies.base import run_pass

# SchedulerSettings fields only the Tiresias policies read: FIFO neither ranks by attained
# service nor preempts. The settings page says so next to each (a property test checks it),
# and `_fifo_view` makes it true for the shared placement code too.
FIFO_IGNORED_SETTINGS = frozenset(
    {
        "queue_thresholds",
        "promote_knob",
        "fairness",
        "min_runtime",
        "preempt_patience",
        "preempt_margin",
        "max_victims",
        "starvation_seconds",
    }
)


_DEFAULTS = SchedulerSettings()


def _fifo_view(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every setting FIFO ignores at its default.

    Shared placement code reads some of them (AlloX's window step takes its patience from
    the first queue threshold); pinned, they cannot move FIFO's jobs between GPUs.
    """
    pinned = {name: getattr(_DEFAULTS, name) for name in FIFO_IGNORED_SETTINGS}
    return replace(snapshot, settings=replace(snapshot.settings, **pinned))


def fifo_order(snapshot: Snapshot) -> list[Job]:
    # Submit time, not queue entry: FIFO baselines ignore Tiresias queues entirely.
    return sorted(snapshot.jobs, key=lambda job: (job.submit_time, job.id))


def decide_fifo(snapshot: Snapshot) -> Decisions:
    """Strict FIFO: in submit order, stop at the first job that does not fit."""
    snapshot = _fifo_view(snapshot)
    return run_pass(snapshot, fifo_order(snapshot), head_of_line_blocking=True)


def decide_fifo_backfill(snapshot: Snapshot) -> Decisions:
    """FIFO with skip-ahead: in submit order, start every job that fits."""
    snapshot = _fifo_view(snapshot)
    return run_pass(snapshot, fifo_order(snapshot))
