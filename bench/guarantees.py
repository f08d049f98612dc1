"""What a group's guaranteed GPUs buy it on a cluster another group has filled.

The scenario product.md's ask 8 describes (kueue#1714: "users who submit at 6 am may take
the unused capacity for the whole day"): on 32 GPUs (4 nodes x 8), group `hog` submits 40
one-GPU jobs of 12 h at t = 0 and one more every 30 minutes, so the cluster is never idle.
Group `lab` (4 users) submits Poisson arrivals, one every 20 minutes on average, of 1 GPU
(70 %) or 2 GPUs (30 %) running 10 minutes to 2 hours (log-uniform): about 4 GPUs of
demand on average. Both run for 48 hours; the replay stops when the last lab job is done.

Each row replays the same trace through the live `las` policy with gpulab's defaults
(restore cost 30 s, min runtime 300 s, patience 600 s, queue margin 3, one victim per
waiting job), changing only lab's `guaranteed_gpus`. Waits are from submission to first
start; JCT from submission to the end.

Usage: .venv/bin/python bench/guarantees.py [--seed 0] [--guarantees 0,4,8,16]
Prints a table and writes bench/results/guarantees.json. Numbers are never asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import math
import platform
import random
import time

from scheduler.core.types import Account, SchedulerSettings
from scheduler.sim.clusters import homogeneous_cluster
from scheduler.sim.engine import SimConfig, SimResult, simulate
from scheduler.sim.metrics import json_safe, percentile
from scheduler.sim.traces import TraceJob

HOURS = 3600.0


def scenario(seed: int, *, hours: float = 48.0) -> list[TraceJob]:
    """The trace of the module docstring, ids in submission order."""
    rng = random.Random(seed)
    arrivals: list[tuple[float, str, str, int, float]] = []
    for index in range(40):
        arrivals.append((float(index), "hog", "hog", 1, 12 * HOURS))
    at = 1800.0
    while at < hours * HOURS:
        arrivals.append((at, "hog", "hog", 1, 12 * HOURS))
        at += 1800.0
    at = 0.0
    while True:
        at += -math.log(1.0 - rng.random()) * 1200.0
        if at >= hours * HOURS:
            break
        gpus = 1 if rng.random() < 0.7 else 2
        duration = 10 ** rng.uniform(math.log10(600.0), math.log10(7200.0))
        arrivals.append((at, f"lab{rng.randrange(4)}", "lab", gpus, duration))
    arrivals.sort(key=lambda item: item[0])
    return [
        TraceJob(
            id=job_id,
            num_gpus=gpus,
            submit_time=submit,
            duration=duration,
            user=user,
            group=group,
        )
        for job_id, (submit, user, group, gpus, duration) in enumerate(arrivals)
    ]


def measure(result: SimResult, trace: list[TraceJob]) -> dict[str, float | int]:
    group_of = {job.id: job.group for job in trace}
    lab = [r for r in result.records if group_of[r.id] == "lab"]
    hog = [r for r in result.records if group_of[r.id] == "hog"]
    lab_waits = [r.first_start - r.submit_time for r in lab if r.first_start is not None]
    lab_jcts = [r.jct for r in lab if r.jct is not None]
    hog_done = [r.jct for r in hog if r.jct is not None]
    return {
        "lab_jobs": len(lab),
        "lab_unfinished": sum(1 for r in lab if r.jct is None),
        "lab_avg_wait_s": sum(lab_waits) / len(lab_waits),
        "lab_p95_wait_s": percentile(lab_waits, 95),
        "lab_max_wait_s": max(lab_waits),
        "lab_avg_jct_s": sum(lab_jcts) / len(lab_jcts),
        "hog_finished": len(hog_done),
        "hog_avg_jct_s": sum(hog_done) / len(hog_done) if hog_done else math.nan,
        "hog_service_h": sum(r.service for r in hog) / HOURS,
        "preemptions_of_hog": sum(r.preemptions for r in hog),
        "preemptions_of_lab": sum(r.preemptions for r in lab),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guarantees", default="0,4,8,16")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "guarantees.json"))
    options = parser.parse_args(argv)

    cluster = homogeneous_cluster(4, 8)
    trace = scenario(options.seed)
    lab_ids = frozenset(job.id for job in trace if job.group == "lab")
    print(
        f"trace: {len(trace)} jobs ({len(lab_ids)} of lab), seed {options.seed}; "
        f"cluster: {cluster.describe()}"
    )
    header = (
        f"{'lab guarantee':>14}{'avg wait':>10}{'p95 wait':>10}{'max wait':>10}"
        f"{'lab JCT':>10}{'hog GPU-h':>11}{'hog preempt':>13}{'wall s':>8}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for guarantee in [int(g) for g in options.guarantees.split(",") if g.strip()]:
        groups = (Account("lab", guaranteed_gpus=guarantee), Account("hog"))
        config = SimConfig(check_invariants=False, groups=groups, stop_when_finished=lab_ids)
        started = time.perf_counter()
        result = simulate(trace, cluster, SchedulerSettings(policy="las"), config=config)
        wall = time.perf_counter() - started
        row = {"lab_guaranteed_gpus": guarantee, **measure(result, trace), "wall_seconds": wall}
        rows.append(row)
        print(
            f"{guarantee:>14}{row['lab_avg_wait_s'] / 60:>9.1f}m{row['lab_p95_wait_s'] / 60:>9.1f}m"
            f"{row['lab_max_wait_s'] / 60:>9.1f}m{row['lab_avg_jct_s'] / 60:>9.1f}m"
            f"{row['hog_service_h']:>11.0f}{row['preemptions_of_hog']:>13}{wall:>8.1f}"
        )
    document = {
        "benchmark": "guarantees",
        "seed": options.seed,
        "cluster_gpus": cluster.num_gpus,
        "python": platform.python_version(),
        "rows": rows,
    }
    out = Path(options.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(document), indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
