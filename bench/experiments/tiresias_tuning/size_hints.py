"""Exploratory (not gpulab policy): how much of the gap to SRSF on the contended Philly-like
traces is missing size knowledge, and whether walltime requests could supply it.

Same traces as bench/tiresias_compare.py (1,500 jobs, 8 x 8 GPUs, load 1.0 at q0.95).
Configurations, each at restore cost 0 and 30 s on seeds 0-2:

- srsf, fine-las (free), gpulab default: bench/tiresias_compare.py's rows;
- gittins (free) / gittins default: Tiresias' 2D-Gittins (gpulab's `gittins` policy, prior
  yarn-gput1000 and then the trace's own finished jobs) under the fine-las and default rules;
- srsf-walltime fF: SRSF ranking by a walltime instead of the true size. The walltime is
  what a user would request: the run time times U(1, F), rounded up to the next of 1, 2, 4,
  8, 12, 24, 48, 72, 168, 336, 720 hours (none past 720 h). Its GPU-seconds bound
  B = walltime x GPUs is a hard upper bound on the job's size once walltimes are enforced;
- las-walltime kK fF: gpulab's default, where a job with a walltime takes the queue of
  min(attained, (B - attained) / K) instead of its attained service's (a job nearing its
  bound moves up); jobs without a walltime are untouched;
- las-serpt fF: the same with the expected remaining size under the prior truncated at B,
  E[S - a | a < S <= B], instead of (B - a) / K.

Monkeypatches scheduler.policies internals in its worker processes; not imported by
anything. Usage: .venv/bin/python bench/experiments/tiresias_tuning/size_hints.py [OUT.jsonl]
"""

import json
import math
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np

import scheduler.policies.las as las
import scheduler.policies.srtf as srtf
import tiresias_compare
from scheduler.core.accounting import queue_level_for
from scheduler.core.types import PlacementKind, SchedulerSettings
from scheduler.policies.gittins import load_prior
from scheduler.sim.clusters import homogeneous_cluster
from scheduler.sim.engine import SimConfig, simulate
from scheduler.sim.generators import philly_like
from scheduler.sim.metrics import summarize

BUCKET_HOURS = (1, 2, 4, 8, 12, 24, 48, 72, 168, 336, 720)
SEEDS = (0, 1, 2)
RESTORES = (0.0, 30.0)
DEFAULT = (SchedulerSettings(policy="las", placement=PlacementKind.BEST_FIT), 10.0)
FREE = tiresias_compare.CONFIGS["fine-las (free)"]
# label: (base configuration, hint kind, overestimate F, K)
CONFIGS = {
    "srsf (oracle)": (tiresias_compare.CONFIGS["srsf (oracle)"], None, 0, 0),
    "2d-las (tiresias)": (tiresias_compare.CONFIGS["2d-las (tiresias)"], None, 0, 0),
    "2d-las+knob8": (tiresias_compare.CONFIGS["2d-las+knob8"], None, 0, 0),
    "fine-las (free)": (FREE, None, 0, 0),
    "gpulab default": (DEFAULT, None, 0, 0),
    "gittins (free)": ((replace(FREE[0], policy="gittins"), 0.0), None, 0, 0),
    "gittins default": ((replace(DEFAULT[0], policy="gittins"), 10.0), None, 0, 0),
    "srsf-walltime f1": (tiresias_compare.CONFIGS["srsf (oracle)"], "srsf", 1.0, 0),
    "srsf-walltime f3": (tiresias_compare.CONFIGS["srsf (oracle)"], "srsf", 3.0, 0),
    "srsf-walltime f10": (tiresias_compare.CONFIGS["srsf (oracle)"], "srsf", 10.0, 0),
    "las-walltime k4 f3": (DEFAULT, "las", 3.0, 4),
    "las-walltime k16 f3": (DEFAULT, "las", 3.0, 16),
    "las-walltime k16 f10": (DEFAULT, "las", 10.0, 16),
    "las-serpt f3": (DEFAULT, "serpt", 3.0, 0),
}


def walltime_bounds(trace, overestimate: float) -> dict[int, float]:
    rng = random.Random(7)
    bounds = {}
    for job in trace:
        wanted = job.duration * rng.uniform(1.0, overestimate)
        hours = next((h for h in BUCKET_HOURS if h * 3600 >= wanted), math.inf)
        bounds[job.id] = hours * 3600 * job.num_gpus
    return bounds


def truncated_remaining(attained: float, bound: float) -> float:
    """E[S - a | a < S <= B] under the shipped prior; (B - a) / 2 where it has no mass."""
    if math.isinf(bound):
        return math.inf
    prior = load_prior()
    lo = np.searchsorted(prior.sizes, attained, side="right")
    hi = np.searchsorted(prior.sizes, bound, side="right")
    if hi <= lo:
        return max(bound - attained, 0.0) / 2
    return float((prior.prefix[hi] - prior.prefix[lo]) / (hi - lo) - attained)


def install_hint(kind: str, bounds: dict[int, float], k: float) -> None:
    if kind == "srsf":
        srtf.remaining_service = lambda job: max(bounds[job.id] - job.attained_service, 0.0)
        return
    plain = las.tiresias_queues

    def hinted(snapshot):
        queues = plain(snapshot)
        thresholds = snapshot.settings.queue_thresholds
        levels = dict(queues.levels)
        for job in snapshot.jobs:
            bound, attained = bounds[job.id], job.attained_service
            if kind == "serpt":
                remaining = truncated_remaining(attained, bound)
            else:
                remaining = max(bound - attained, 0.0) / k
            levels[job.id] = min(levels[job.id], queue_level_for(remaining, thresholds))
        return las.TiresiasQueues(levels, queues.entered_at, queues.changes)

    las.tiresias_queues = hinted


def run(task):
    label, seed, restore = task
    (settings, tick), kind, overestimate, k = CONFIGS[label]
    trace = philly_like(1500, 64, load=1.0, seed=seed, load_quantile=0.95)
    if kind:
        install_hint(kind, walltime_bounds(trace, overestimate), k)
    result = simulate(
        trace,
        homogeneous_cluster(8, 8),
        replace(settings, restore_cost=restore),
        config=SimConfig(tick=tick, check_invariants=False),
    )
    m = summarize(result)
    return {
        "label": label,
        "seed": seed,
        "restore": restore,
        "avg_wait": m["avg_queueing_delay"],
        "preemptions": m["preemptions"],
        "avg_jct_16gpu": m["by_num_gpu"]["16"]["avg_jct"],
    }


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("size_hints.jsonl"))
    tasks = [(label, s, r) for label in CONFIGS for s in SEEDS for r in RESTORES]
    # One process per task: the hints monkeypatch module globals.
    with ProcessPoolExecutor(2, max_tasks_per_child=1) as pool:
        rows = list(pool.map(run, tasks))
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ref = {(r["label"], r["seed"], r["restore"]): r for r in rows}
    print(f"{'configuration':<22}" + "".join(f"{f's{s} r{r:g}':>17}" for s in SEEDS for r in RESTORES))
    print(f"{'':<22}" + f"{'wait/pre/16-GPU':>17}" * len(SEEDS) * len(RESTORES))
    for label in CONFIGS:
        cells = []
        for s in SEEDS:
            for r in RESTORES:
                row = ref[(label, s, r)]
                base = (s, r)
                cells.append(
                    f"{row['avg_wait'] / ref[('srsf (oracle)', *base)]['avg_wait']:.2f}/"
                    f"{row['preemptions']}/{row['avg_jct_16gpu'] / 1000:.1f}k"
                )
        print(f"{label:<22}" + "".join(f"{c:>17}" for c in cells))
    print(f"wait as a multiple of SRSF's; preemptions; 16-GPU average JCT. Rows in {out}")


if __name__ == "__main__":
    main()
