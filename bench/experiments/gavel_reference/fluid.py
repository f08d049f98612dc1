"""Gavel's heterogeneity-aware LAS as a fluid model, on gpulab's Gavel workload.

Why: issue 3 compares gpulab with the average JCT Gavel's authors published for their
heterogeneity-aware LAS (19.0 h at 5.6 jobs/h). This replays the *same* job stream
(`scheduler.sim.gavel.generate_jobs`, seed 0) under an idealized form of that policy, to
learn what it reaches on this workload model, independently of gpulab's policy code.

The policy (Gavel `scheduler/policies/max_min_fairness.py`, `MaxMinFairnessPolicyWithPerf`):
every active job j gets time fractions x[j, t] on each device type t (sum over t <= 1,
sum over j <= devices of t), chosen to maximize min_j  thr_j . x_j / iso_j, where iso_j is
the job's throughput under heterogeneity-blind max-min (equal time on every type, so
iso_j is proportional to the mean of its per-type speeds).

Idealizations, all in Gavel's favour: fluid time slicing (every job progresses at
sum_t x[j, t] thr[j, t] continuously, no 360 s rounds, no rounding to whole devices), and
free switches. The allocation is recomputed at every arrival and completion.

The max-min LP has many optima; Gavel's cvxpy solve returns one of them. `--tiebreak`
picks which: `none` (HiGHS's first optimum), `throughput` (then maximize total work rate,
V100-equivalents), `normalized` (then maximize the sum of normalized rates).

Usage: .venv/bin/python bench/experiments/gavel_fluid/fluid.py --rate 5.6 --tiebreak throughput
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix, hstack, identity, kron, vstack

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEVICES_PER_TYPE, WINDOW, emit, job_stream, progress, window_summary


def allocate(speeds: np.ndarray, tiebreak: str) -> np.ndarray:
    """Time fractions x (n × T) for jobs with per-type speeds `speeds` (n × T)."""
    n, types = speeds.shape
    positive = np.where(speeds > 0, speeds, np.nan)
    iso = np.nanmean(positive, axis=1)  # ∝ throughput under equal time on every type
    a = speeds / iso[:, None]  # normalized speed of job j on type t
    nx = n * types
    # Rows: per job  z - a_j . x_j <= 0 ; per job sum_t x <= 1 ; per type sum_j x <= 36.
    a_rows = csr_matrix(
        (-a.ravel(), (np.repeat(np.arange(n), types), np.arange(nx))), shape=(n, nx)
    )
    job_rows = kron(identity(n), np.ones((1, types)), format="csr")
    type_rows = kron(np.ones((1, n)), identity(types), format="csr")
    z_column = csr_matrix(np.concatenate([np.ones(n), np.zeros(n + types)])[:, None])
    a_ub = hstack([vstack([a_rows, job_rows, type_rows]), z_column], format="csr")
    b_ub = np.concatenate([np.zeros(n), np.ones(n), np.full(types, DEVICES_PER_TYPE)])
    bounds = [(0.0, 1.0 if s > 0 else 0.0) for s in speeds.ravel()] + [(0.0, None)]
    cost = np.zeros(nx + 1)
    cost[-1] = -1.0
    first = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if first.status != 0:
        raise RuntimeError(first.message)
    if tiebreak == "none":
        return first.x[:nx].reshape(n, types)
    z_star = first.x[-1] * (1.0 - 1e-7)
    bounds[-1] = (z_star, z_star)
    weights = speeds if tiebreak == "throughput" else a
    cost = np.concatenate([-weights.ravel(), [0.0]])
    second = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if second.status != 0:
        raise RuntimeError(second.message)
    return second.x[:nx].reshape(n, types)


def replay(jobs_per_hour: float, tiebreak: str, seed: int = 0, tail_hours: float = 400.0) -> dict:
    jobs, speed, horizon = job_stream(jobs_per_hour, seed, tail_hours)
    window = set(range(*WINDOW))
    remaining: dict[int, float] = {}
    finished: dict[int, float] = {}
    now = 0.0
    next_arrival = 0
    solves = 0
    started = time.monotonic()
    while window - finished.keys() and now < horizon:
        active = sorted(remaining)
        rates = np.zeros(0)
        if active:
            speeds = np.stack([speed[i] for i in active])
            x = allocate(speeds, tiebreak)
            solves += 1
            rates = (x * speeds).sum(axis=1)
        arrival_at = jobs[next_arrival].arrival if next_arrival < len(jobs) else math.inf
        with np.errstate(divide="ignore"):
            finish_in = np.where(rates > 1e-12, [remaining[i] for i in active] / rates, math.inf)
        step = min(arrival_at - now, float(finish_in.min()) if active else math.inf)
        for index, job_id in enumerate(active):
            remaining[job_id] -= rates[index] * step
        now += step
        for job_id in active:
            if remaining[job_id] <= 1e-6 * jobs[job_id].duration:
                del remaining[job_id]
                finished[job_id] = now - jobs[job_id].arrival
        while next_arrival < len(jobs) and jobs[next_arrival].arrival <= now:
            remaining[next_arrival] = jobs[next_arrival].duration
            next_arrival += 1
        if solves % 500 == 0:
            progress(now, len(remaining), len(finished))
    return {
        "jobs_per_hour": jobs_per_hour,
        "tiebreak": tiebreak,
        **window_summary(finished),
        "solves": solves,
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5.6)
    parser.add_argument(
        "--tiebreak", choices=("none", "throughput", "normalized"), default="throughput"
    )
    parser.add_argument("--jsonl", type=Path)
    args = parser.parse_args()
    result = replay(args.rate, args.tiebreak)
    emit(result, args.jsonl)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
