"""Gavel's round-based mechanism and policies, reimplemented, on gpulab's Gavel workload.

Why: issue 3's anchor for 5.6 jobs/h is the average JCT Gavel's authors published for their
heterogeneity-aware LAS (19.0 h). `fluid.py` beside this file replays the same job stream
under an idealized, fluid form of that policy and gets 28.4 h, far from 19.0 h. Gavel's
simulator is not a fluid model, so this script replays the job stream under Gavel's own
mechanism, written from reading `stanford-futuredata/gavel` (`scheduler/scheduler.py` at
c4fa400: `simulate`, `_update_priorities`, `_reset_time_run_so_far`,
`_schedule_jobs_on_workers_helper`, `_done_callback`; `scheduler/policies/
max_min_fairness.py`). No Gavel code is copied; the rules, as read:

- Rounds of `--round` seconds (360). Each scheduled job runs min(its remaining work, one
  round's worth at its speed on the device type); the round ends when the last of them
  does, and jobs finish at their own finish time.
- The allocation (time fractions x[j, t]) is `MaxMinFairnessPolicyWithPerf`: maximize
  min_j sum_t thr[j, t] x[j, t] / iso_j, with iso_j the job's throughput under the
  heterogeneity-blind max-min allocation (all throughputs 1), both solved by cvxpy with
  ECOS, Gavel's default solver. It is recomputed only when jobs arrived or finished and
  at least `--reset` seconds (1920, the Scheduler's default) passed since the last
  recomputation; at that moment each job's deficit grows by (time it should have had
  under the old allocation - time it had) and the time counters restart at half a round.
- A job added since the last recomputation has no allocation and is not placed until the
  next one (Gavel's assignment skips it).
- Priority of job j on type t: x[j, t] / (its share of t's time since the reset);
  per type, jobs sorted by (priority, deficit, allocation), descending; V100's list, then
  P100's, then K80's, each job placed at most once, on the first list where a device is
  left. Jobs with zero allocation on a type can still fill leftover devices of it.

Needs cvxpy (not a gpulab dependency): `python3 -m venv /tmp/gvenv && /tmp/gvenv/bin/pip
install -r bench/experiments/gavel_reference/requirements.txt`, then
`/tmp/gvenv/bin/python bench/experiments/gavel_reference/rounds.py --rate 5.6`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cvxpy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEVICES_PER_TYPE, TYPES, WINDOW, emit, job_stream, progress, window_summary


def max_min(weights: np.ndarray, solver: str) -> np.ndarray:
    """x maximizing min_j weights[j] . x[j] within the cluster (Gavel's base constraints)."""
    x = cp.Variable(weights.shape)
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(weights, x), axis=1)))
    constraints = [
        x >= 0,
        cp.sum(x, axis=1) <= 1,
        cp.sum(x, axis=0) <= DEVICES_PER_TYPE,
    ]
    problem = cp.Problem(objective, constraints)
    problem.solve(solver=solver)
    return np.clip(x.value, 0.0, 1.0)


def las_allocation(speeds: np.ndarray, solver: str, aware: bool = True) -> np.ndarray:
    """Gavel's MaxMinFairnessPolicyWithPerf for jobs with per-type `speeds` (n × T).

    `aware=False`: its heterogeneity-agnostic LAS (`MaxMinFairnessPolicy`), the same
    max-min with every throughput taken as 1.
    """
    isolated = max_min(np.ones_like(speeds), solver)
    if not aware:
        return isolated
    iso = (speeds * isolated).sum(axis=1)
    return max_min(speeds / iso[:, None], solver)


class AlloXReference:
    """Gavel's AlloX policy (`AlloX_Perf`, `scheduler/policies/allox.py`), as read; alpha 1.

    Jobs holding a whole device from an earlier computation keep it until they finish.
    The others, oldest first, are matched to the free devices with costs position ×
    processing time + time since arrival (Hungarian method); a job gets the type of the
    device it is first on, and a job matched to no first place is reconsidered next time.
    """

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha
        self.previous: dict[int, np.ndarray] = {}

    def __call__(
        self,
        active: list[int],
        speeds: dict[int, np.ndarray],
        remaining: dict[int, float],
        waited: dict[int, float],
    ) -> dict[int, np.ndarray]:
        from scipy.optimize import linear_sum_assignment

        placed = [j for j in active if j in self.previous and self.previous[j].sum() == 1.0]
        new = [j for j in active if j not in placed]
        free_types: list[int] = []
        for type_index in range(len(TYPES)):
            taken = sum(1 for j in placed if self.previous[j][type_index] == 1.0)
            free_types += [type_index] * (DEVICES_PER_TYPE - taken)
        n = len(free_types)
        new.sort(key=lambda j: -waited[j])
        new = new[: max(int(self.alpha * len(new)), n)]
        m = len(new)
        result = {j: self.previous.get(j, np.zeros(len(TYPES))).copy() for j in active}
        if m and n:
            base = np.array(
                [[remaining[j] / max(speeds[j][t], 1e-10) for t in free_types] for j in new]
            )
            cost = np.concatenate([k * base for k in range(1, m + 1)], axis=1)
            cost += np.array([waited[j] for j in new])[:, None]
            rows, cols = linear_sum_assignment(cost)
            per_device: dict[int, list[tuple[int, int]]] = {d: [] for d in range(n)}
            for row, col in zip(rows, cols, strict=True):
                per_device[col % n].append((new[row], col // n))
            for device, entries in per_device.items():
                if entries:
                    # Highest multiplier = runs first on that device.
                    first = max(entries, key=lambda e: e[1])[0]
                    result[first][free_types[device]] = 1.0
        self.previous = {j: result[j].copy() for j in active}
        return result


def replay(
    jobs_per_hour: float,
    *,
    seed: int = 0,
    round_seconds: float = 360.0,
    reset_seconds: float = 1920.0,
    solver: str = "ECOS",
    policy: str = "las-aware",
    tail_hours: float = 400.0,
) -> dict:
    jobs, speed, horizon = job_stream(jobs_per_hour, seed, tail_hours)
    half = round_seconds / 2.0
    allox = AlloXReference()
    # Active job -> V100-seconds of work left; insertion order is arrival order.
    remaining: dict[int, float] = {}
    time_so_far: dict[int, np.ndarray] = {}
    deficit: dict[int, np.ndarray] = {}
    alloc: dict[int, np.ndarray] = {}
    worker_time = np.zeros(len(TYPES))
    last_reset = 0.0
    need_update = False
    finished: dict[int, float] = {}
    running: list[tuple[int, int, float, float]] = []  # (job, type index, finish, work)
    round_start = 0.0
    now = 0.0
    next_arrival = 0
    solves = 0
    rounds = 0
    wasted_slots = 0
    started = time.monotonic()
    window = set(range(*WINDOW))
    while window - finished.keys() and now < horizon:
        if running:
            now = max(finish for _, _, finish, _ in running)
        elif next_arrival < len(jobs):
            now = max(now, jobs[next_arrival].arrival)
        else:
            break
        for job_id, type_index, finish, work in running:
            remaining[job_id] -= work
            execution = finish - round_start
            time_so_far[job_id][type_index] += execution
            worker_time[type_index] += execution
            if remaining[job_id] <= 1e-9 * jobs[job_id].duration:
                finished[job_id] = finish - jobs[job_id].arrival
                for store in (remaining, time_so_far, deficit, alloc):
                    store.pop(job_id, None)
                need_update = True
        running = []
        round_start = now
        while next_arrival < len(jobs) and jobs[next_arrival].arrival <= now:
            job_id = next_arrival
            remaining[job_id] = jobs[job_id].duration
            time_so_far[job_id] = np.full(len(TYPES), half)
            deficit[job_id] = np.zeros(len(TYPES))
            need_update = True
            next_arrival += 1
        if not remaining:
            continue
        if need_update and (now - last_reset >= reset_seconds or last_reset == 0):
            elapsed = now - last_reset
            worker_time[:] = 0.0
            for job_id in remaining:
                should = alloc[job_id] * elapsed if job_id in alloc else 0.0
                deficit[job_id] += should - (time_so_far[job_id] - half)
                time_so_far[job_id][:] = half
                worker_time += half
            active = list(remaining)
            if policy == "allox":
                waited = {j: now - jobs[j].arrival for j in active}
                alloc = allox(active, speed, remaining, waited)
            else:
                x = las_allocation(
                    np.stack([speed[j] for j in active]), solver, aware=policy == "las-aware"
                )
                alloc = {job_id: x[row] for row, job_id in enumerate(active)}
            solves += 1
            last_reset = now
            need_update = False
        # Priorities and the greedy pass, V100's list first.
        scheduled: set[int] = set()
        left = [DEVICES_PER_TYPE] * len(TYPES)
        for type_index in range(len(TYPES)):
            entries = []
            for job_id in remaining:
                share = alloc[job_id][type_index] if job_id in alloc else 0.0
                if job_id not in alloc or share == 0.0 or speed[job_id][type_index] == 0.0:
                    priority = 0.0
                elif worker_time[type_index] == 0.0:
                    priority = share * 1e9
                else:
                    priority = share / (time_so_far[job_id][type_index] / worker_time[type_index])
                entries.append((priority, deficit[job_id][type_index], share, job_id))
            # Stable sort, descending on the key: equal keys keep arrival order, as in Gavel.
            entries.sort(key=lambda e: (e[0], e[1], e[2]), reverse=True)
            for _, _, _, job_id in entries:
                if left[type_index] == 0:
                    break
                if job_id in scheduled or speed[job_id][type_index] <= 0.0:
                    continue
                left[type_index] -= 1
                scheduled.add(job_id)
                if job_id not in alloc:
                    wasted_slots += 1  # takes a device in the pass, then is not dispatched
                    continue
                rate = speed[job_id][type_index]
                work = min(rate * round_seconds, remaining[job_id])
                running.append((job_id, type_index, now + work / rate, work))
        rounds += 1
        if rounds % 2000 == 0:
            progress(now, len(remaining), len(finished))
    return {
        "jobs_per_hour": jobs_per_hour,
        "round_seconds": round_seconds,
        "reset_seconds": reset_seconds,
        "solver": solver,
        "seed": seed,
        "policy": f"gavel-{policy}",
        **window_summary(finished),
        "rounds": rounds,
        "solves": solves,
        "slots_taken_by_jobs_without_allocation": wasted_slots,
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5.6)
    parser.add_argument("--round", type=float, default=360.0)
    parser.add_argument("--reset", type=float, default=1920.0)
    parser.add_argument("--solver", default="ECOS")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--policy",
        choices=("las-aware", "las-agnostic", "allox"),
        default="las-aware",
        help="Gavel's heterogeneity-aware LAS, its agnostic LAS, or its AlloX",
    )
    parser.add_argument("--jsonl", type=Path)
    args = parser.parse_args()
    result = replay(
        args.rate,
        seed=args.seed,
        round_seconds=args.round,
        reset_seconds=args.reset,
        solver=args.solver,
        policy=args.policy,
    )
    emit(result, args.jsonl)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
