"""Summary metrics of a replay, in the `--json` schema (times in seconds).

Per policy::

    jobs_finished, avg_jct, median_jct, p95_jct, p99_jct, avg_queueing_delay, makespan,
    gpu_utilization, preemptions, jain_fairness, by_num_gpu: {"<n>": {count, avg_jct}}

plus a few extras (jobs_total, preemptions_per_job, restore counts, rounds, ...).

Definitions:
- JCT = finish − submit; queueing delay = all the time a job spent pending (before its
  first start and after every preemption);
- makespan = last finish − first submit;
- GPU utilization = GPU-seconds held / (cluster GPUs × makespan); restore time counts as
  held (the devices are busy restoring);
- Jain's fairness index over per-user mean slowdown, slowdown = JCT / the job's
  uninterrupted run time on its fastest type. A trace without users (every job belongs to
  "default") gets the index over per-job slowdown instead, so the number still says how
  evenly the delay was spread;
- percentiles use linear interpolation between closest ranks (numpy's default).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

from scheduler.sim.engine import JobRecord, SimResult

REQUIRED_KEYS = (
    "jobs_finished",
    "avg_jct",
    "median_jct",
    "p95_jct",
    "p99_jct",
    "avg_queueing_delay",
    "makespan",
    "gpu_utilization",
    "preemptions",
    "jain_fairness",
    "by_num_gpu",
)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def jain_index(values: Sequence[float]) -> float:
    """(Σx)² / (n Σx²): 1 when all equal, 1/n when one value holds everything."""
    if not values:
        return math.nan
    square_sum = sum(x * x for x in values)
    if square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarize(result: SimResult) -> dict[str, object]:
    """The per-policy JSON object for `result`."""
    records = result.records
    done = [r for r in records if r.finish_time is not None]
    jcts = [r.jct for r in done if r.jct is not None]
    first_submit = min((r.submit_time for r in records), default=0.0)
    last_finish = max((r.finish_time for r in done if r.finish_time is not None), default=0.0)
    makespan = max(last_finish - first_submit, 0.0) if done else math.nan
    held = _gpu_seconds_held(result.busy_timeline)
    capacity = result.cluster.num_gpus * makespan if done else math.nan
    by_gpu: dict[int, list[float]] = defaultdict(list)
    for record in done:
        by_gpu[record.num_gpus].append(record.jct or 0.0)
    preemptions = sum(r.preemptions for r in records)
    summary: dict[str, object] = {
        "jobs_finished": len(done),
        "avg_jct": _mean(jcts),
        "median_jct": percentile(jcts, 50),
        "p95_jct": percentile(jcts, 95),
        "p99_jct": percentile(jcts, 99),
        "avg_queueing_delay": _mean([r.queueing_delay for r in done]),
        "makespan": makespan,
        "gpu_utilization": held / capacity if capacity and capacity > 0 else math.nan,
        "preemptions": preemptions,
        "jain_fairness": jain_index(_slowdowns_by_owner(done)),
        "by_num_gpu": {
            str(n): {"count": len(values), "avg_jct": _mean(values)}
            for n, values in sorted(by_gpu.items())
        },
        # Extras (not in issue 3's schema; readers may ignore them).
        "jobs_total": len(records),
        "preemptions_per_job": preemptions / len(records) if records else math.nan,
        "max_preemptions": max((r.preemptions for r in records), default=0),
        "resumes": sum(r.resumes for r in records),
        "promotions": sum(r.promotions for r in records),
        "avg_slowdown": _mean([_slowdown(r) for r in done]),
        "rounds": result.rounds,
        "stop_reason": result.stop_reason,
    }
    return summary


def _slowdown(record: JobRecord) -> float:
    if record.jct is None or record.ideal_runtime <= 0 or math.isinf(record.ideal_runtime):
        return math.nan
    return record.jct / record.ideal_runtime


def _slowdowns_by_owner(done: Sequence[JobRecord]) -> list[float]:
    users = {r.user for r in done}
    if len(users) <= 1:
        return [s for s in (_slowdown(r) for r in done) if not math.isnan(s)]
    per_user: dict[str, list[float]] = defaultdict(list)
    for record in done:
        value = _slowdown(record)
        if not math.isnan(value):
            per_user[record.user].append(value)
    return [_mean(values) for _, values in sorted(per_user.items())]


def _gpu_seconds_held(timeline: Sequence[tuple[float, int]]) -> float:
    total = 0.0
    for (t0, busy), (t1, _) in pairwise(timeline):
        total += busy * (t1 - t0)
    return total


def json_safe(value: object) -> object:
    """NaN/inf are not JSON: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
