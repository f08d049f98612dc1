"""Simulator throughput: a generated 20,000-job Philly-like trace on 256 GPUs.

Trace: `scheduler.sim.generators.philly_like` (YARN GPU-time, 1–16 GPUs, Poisson arrivals)
at offered load `--load` [1.0] on 32 nodes × 8 GPUs, seed 0. Each policy replays the whole
trace in default mode (restore cost 30 s, min runtime 300 s, 10 s timer, best-fit). Target
(issue 3): under 60 s per policy on a 2-core machine. Invariant checks are off (as in any
long replay; the test suite runs them), and no progress bar.

Usage: .venv/bin/python bench/simulate.py [--jobs 20000] [--policies las,srsf,fifo]
Prints a table and writes bench/results/simulate.json. Numbers are never asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import platform
import time

from scheduler.core.types import PlacementKind, SchedulerSettings
from scheduler.sim.clusters import homogeneous_cluster
from scheduler.sim.engine import SimConfig, simulate
from scheduler.sim.generators import philly_like
from scheduler.sim.metrics import json_safe, summarize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--load-quantile",
        type=float,
        default=1.0,
        help="arrival rate from GPU-times clipped at this quantile [1.0 = mean; 0.95 = the "
        "contended setting of tiresias_compare.py]",
    )
    parser.add_argument("--policies", default="las,srsf,fifo-backfill")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "simulate.json"))
    options = parser.parse_args(argv)

    cluster = homogeneous_cluster(32, 8)
    started = time.perf_counter()
    trace = philly_like(
        options.jobs,
        cluster.num_gpus,
        load=options.load,
        seed=options.seed,
        load_quantile=options.load_quantile,
    )
    generate_s = time.perf_counter() - started
    print(
        f"trace: {len(trace)} jobs (philly-like, load {options.load} at q{options.load_quantile}, "
        f"seed {options.seed}), "
        f"generated in {generate_s:.2f} s; cluster: {cluster.describe()}"
    )
    header = (
        f"{'policy':<15}{'wall s':>9}{'jobs/s':>9}{'rounds':>9}{'rounds/s':>10}"
        f"{'avg JCT s':>12}{'avg wait s':>12}{'preempt':>9}{'target s':>10}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for policy in [p.strip() for p in options.policies.split(",") if p.strip()]:
        settings = SchedulerSettings(policy=policy, placement=PlacementKind.BEST_FIT)
        config = SimConfig(tick=10.0, check_invariants=False)
        started = time.perf_counter()
        result = simulate(trace, cluster, settings, config=config)
        wall = time.perf_counter() - started
        metrics = summarize(result)
        row = {
            "policy": policy,
            "wall_seconds": wall,
            "jobs_per_second": len(trace) / wall,
            "rounds": result.rounds,
            "rounds_per_second": result.rounds / wall,
            "jobs_finished": metrics["jobs_finished"],
            "avg_jct": metrics["avg_jct"],
            "avg_queueing_delay": metrics["avg_queueing_delay"],
            "preemptions": metrics["preemptions"],
            "target_seconds": 60.0,
        }
        rows.append(row)
        print(
            f"{policy:<15}{wall:>9.1f}{row['jobs_per_second']:>9.0f}{result.rounds:>9}"
            f"{row['rounds_per_second']:>10.0f}{metrics['avg_jct']:>12.0f}"
            f"{metrics['avg_queueing_delay']:>12.0f}{metrics['preemptions']:>9}{60:>10}"
        )
    document = {
        "benchmark": "simulate",
        "trace": {"generator": "philly_like", "jobs": options.jobs, "load": options.load,
                  "seed": options.seed, "load_quantile": options.load_quantile,
                  "cluster_gpus": cluster.num_gpus},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "rows": rows,
    }  # fmt: skip
    out = Path(options.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(document), indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
