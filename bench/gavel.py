"""Gavel's heterogeneity experiment: heterogeneity-blind `las` vs `las` + AlloX.

Setting (issue 3, Gavel OSDI'20 §7.2): 36 V100 + 36 P100 + 36 K80 single-GPU servers,
isolated throughputs from Gavel's `simulation_throughputs.json` (scale factor 1), Gavel's
workload generator (`scheduler/sim/gavel.py`: 26 job types uniform, 80% 10^U(1.5, 3) and 20%
10^U(3, 4) minutes on a V100, Poisson arrivals, seed 0), JCT over jobs 4000-4999.

Cells (each a full replay through `scheduler.sim.engine` with the live policy code):
- `las-blind`: `las` with BEST_FIT placement (fastest admin-set type first, no per-model
  knowledge): the heterogeneity-agnostic baseline.
- `las+allox`: gpulab's default, `las` with AlloX placement: the pass, then
  `allox_rematch` (scheduler/policies/allox.py): the window step (AlloX chooses among
  `allox_window` waiting jobs) and moves (running jobs move to free faster devices).
- `las+allox-nomove`: the default without moves (`allox.MIGRATION = False`).
- `las+allox-pass`: AlloX only as the pass's placer (`allox.WINDOW_STEP = False`, no moves):
  what the default was before the window step and moves were wired into `las`.
- `las+allox-tiresias`: the default placement under Tiresias' own rules (2 queues at
  3600 GPU-s, knob 8, no churn control, no starvation guard): the default before them.
- `las+allox-noguard`: the default without the starvation guard.
- `las+allox-nogate`: the default without the efficiency gate (`allox_efficiency_gate = 0`:
  under a queue a waiting job may take any type, as before 2026-11-23's second session).
- `las+allox-noevict`: the default without eviction (`allox.EVICTION = False`: under a
  queue a running job keeps a device it makes little of, as before 2026-11-23's third
  session).
- `las+allox-nolend`: the default without lending idle devices (`allox.FILL_FLOOR = None`:
  under a queue a device no waiting job was narrowed to stays idle).
- `las+allox-nospeeds`: the default, but the policy never sees a job's per-model speeds
  (`Job.throughputs` emptied before every `decide`; jobs still run at their real speeds):
  the live loop when no job reports its progress (`GPULAB_PROGRESS_FILE`), placing by the
  admin-set type speeds (Gavel's geometric means) alone.

Usage:
    .venv/bin/python bench/gavel.py [--rates 4.8,5.6] [--cells las-blind,las+allox,...]
        [--tail-hours 400] [--window 4000,5000] [--seed 0] [--processes 2]

Prints a table and writes bench/results/gavel.json; under the published anchors it also
prints, for the same seed, Gavel's own policies replayed on the same job stream
(bench/experiments/gavel_reference/results.jsonl). Numbers are measured, never asserted;
the published anchors are printed next to them for reading (Gavel's simulator time-shares in
360 s rounds, gpulab runs event-driven Tiresias, see bench/README-gavel.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import math
import platform
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace

from scheduler.core.types import TIRESIAS_RULES, Decisions, PlacementKind, Snapshot
from scheduler.policies.allox import FILL_FLOOR as DEFAULT_FILL_FLOOR
from scheduler.sim.gavel import WINDOW, GavelRun, experiment_settings, run_cell

RESULTS = Path(__file__).resolve().parent / "results" / "gavel.json"
# Gavel's own policies reimplemented and replayed on the same job streams (rounds.py there).
GAVEL_REFERENCE = (
    Path(__file__).resolve().parent / "experiments" / "gavel_reference" / "results.jsonl"
)
CELLS = (
    "las-blind",
    "las+allox",
    "las+allox-nomove",
    "las+allox-pass",
    "las+allox-tiresias",
    "las+allox-noguard",
    "las+allox-nogate",
    "las+allox-noevict",
    "las+allox-nolend",
    "las+allox-nospeeds",
)
# Ablations of the default's settings (the module switches are set in `run_one`).
CELL_OVERRIDES: dict[str, Mapping[str, object]] = {
    # The default before churn control (issue 3's previous sessions): Tiresias' rules.
    "las+allox-tiresias": TIRESIAS_RULES,
    "las+allox-noguard": {"starvation_seconds": 0.0},
    "las+allox-nogate": {"allox_efficiency_gate": 0.0},
}
ANCHORS = {
    # Gavel paper (seed 0), 5.6 jobs/hour, hours: (average JCT, worst JCT), as quoted in issue 3.
    "Gavel LAS, heterogeneity-agnostic": (35.8, 96.0),
    "Gavel LAS, heterogeneity-aware": (19.0, 29.0),
    "AlloX (Gavel's reimplementation)": (20.9, 25.3),
}


def run_one(
    cell: str, rate: float, seed: int, window: tuple[int, int], tail: float, users: str
) -> GavelRun:
    from scheduler.policies import allox

    placement = PlacementKind.BEST_FIT if cell == "las-blind" else PlacementKind.ALLOX
    # Module switches for the ablations; set on every run (pool workers are reused).
    allox.WINDOW_STEP = cell != "las+allox-pass"
    allox.MIGRATION = cell not in ("las+allox-nomove", "las+allox-pass")
    allox.EVICTION = cell != "las+allox-noevict"
    allox.FILL_FLOOR = None if cell == "las+allox-nolend" else DEFAULT_FILL_FLOOR
    blind_to_speeds = cell == "las+allox-nospeeds"
    return run_cell(
        cell if users == "per-job" else f"{cell}/{users}",
        experiment_settings(placement, **CELL_OVERRIDES.get(cell, {})),
        jobs_per_hour=rate,
        seed=seed,
        window=window,
        tail_hours=tail,
        users=users,
        decide=_decide_without_speeds if blind_to_speeds else None,
    )


def _decide_without_speeds(snapshot: Snapshot) -> Decisions:
    """The live policy on a snapshot whose jobs carry no measured speeds."""
    from scheduler.policies import decide

    jobs = tuple(replace(job, throughputs=()) for job in snapshot.jobs)
    return decide(replace(snapshot, jobs=jobs))


def _hours(value: float) -> str:
    return "unfinished" if math.isinf(value) else f"{value:7.1f}"


def _gavel_reference(seed: int, rates: list[float]) -> list[str]:
    """Measured lines of bench/experiments/gavel_reference for this seed and these rates."""
    if not GAVEL_REFERENCE.exists():
        return []
    lines = []
    for raw in GAVEL_REFERENCE.read_text().splitlines():
        row = json.loads(raw)
        if (
            row.get("model") != "rounds"
            or row.get("solver") != "ECOS"
            or row.get("seed") != seed
            or row.get("jobs_per_hour") not in rates
        ):
            continue
        if row.get("window_unfinished"):
            result = f"{row['window_unfinished']} window jobs unfinished"
        else:
            result = f"{row['avg_jct_hours']:5.1f} / {row['worst_jct_hours']:5.1f}"
        lines.append(f"{row['policy']:36} {row['jobs_per_hour']:4.1f}/h  {result}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="4.8,5.6", help="jobs per hour, comma separated")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", default=f"{WINDOW[0]},{WINDOW[1]}")
    parser.add_argument("--tail-hours", type=float, default=400.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--users",
        default="per-job",
        help="per-job (every job its own user) and/or shared (one user), comma separated; "
        "see scheduler.sim.gavel.to_trace",
    )
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument(
        "--jsonl",
        help="also append each run to this file as soon as it finishes (long runs)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep runs of other (cell, rate) pairs already in the output file",
    )
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    cells = [c for c in args.cells.split(",") if c]
    unknown = set(cells) - set(CELLS)
    if unknown:
        parser.error(f"unknown cell(s) {sorted(unknown)}; known: {', '.join(CELLS)}")
    w0, w1 = (int(x) for x in args.window.split(","))

    started = time.perf_counter()
    user_modes = [u for u in args.users.split(",") if u]
    jobs = [(cell, rate, users) for users in user_modes for rate in rates for cell in cells]
    with ProcessPoolExecutor(max_workers=max(1, args.processes)) as pool:
        futures = [
            pool.submit(run_one, cell, rate, args.seed, (w0, w1), args.tail_hours, users)
            for cell, rate, users in jobs
        ]
        for future in as_completed(futures):
            if args.jsonl:
                with open(args.jsonl, "a") as handle:
                    handle.write(json.dumps(asdict(future.result()), default=str) + "\n")
        runs = [future.result() for future in futures]
    total = time.perf_counter() - started

    print(f"Gavel heterogeneity experiment: jobs {w0}-{w1 - 1}, seed {args.seed}, hours")
    print(f"{'policy':30} {'jobs/h':>6} {'avg JCT':>10} {'worst JCT':>10} {'wall s':>7}")
    for run in runs:
        avg, worst = _hours(run.avg_jct_hours), _hours(run.worst_jct_hours)
        if run.unfinished:
            # Censored at the horizon: lower bounds, with how many never finished.
            avg = f">={run.extra['avg_jct_lower_bound_hours']:.1f}"
            worst = f">={run.extra['worst_jct_lower_bound_hours']:.1f}"
        note = f"  ({run.unfinished} window jobs unfinished)" if run.unfinished else ""
        print(
            f"{run.label:30} {run.jobs_per_hour:6.1f} {avg:>10} {worst:>10} "
            f"{run.wall_seconds:7.0f}{note}"
        )
    print("published anchors at 5.6 jobs/h (avg / worst):")
    for name, (avg, worst) in ANCHORS.items():
        print(f"  {name:36} {avg:5.1f} / {worst:5.1f}")
    reference = _gavel_reference(args.seed, rates)
    if reference:
        print(f"Gavel's policies reimplemented, same job stream (seed {args.seed}; avg / worst):")
        for line in reference:
            print(f"  {line}")
    print(f"total wall time {total:.0f} s on {args.processes} process(es)")

    def clean(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    rows = [clean(asdict(run)) for run in runs]
    output = Path(args.output)
    if args.merge and output.exists():
        fresh = {(row["label"], row["jobs_per_hour"]) for row in rows}
        kept = [
            row
            for row in json.loads(output.read_text()).get("runs", [])
            if (row["label"], row["jobs_per_hour"]) not in fresh
        ]
        rows = kept + rows
    order = {cell: index for index, cell in enumerate(CELLS)}
    rows.sort(
        key=lambda row: (
            row["jobs_per_hour"],
            "/" in row["label"],
            order.get(row["label"].split("/")[0], 99),
        )
    )
    payload = {
        "benchmark": "gavel",
        "setting": {
            "cluster": "36 v100 + 36 p100 + 36 k80, 1 GPU per server",
            "throughputs": "scheduler/data/gavel_simulation_throughputs.json (isolated, sf 1)",
            "window": [w0, w1],
            "seed": args.seed,
            "tail_hours": args.tail_hours,
        },
        "python": platform.python_version(),
        "machine": platform.machine(),
        "last_invocation_wall_seconds": total,
        "runs": rows,
        "anchors_5_6": {name: {"avg": a, "worst": w} for name, (a, w) in ANCHORS.items()},
        "note": (
            "avg/worst null = some window job had not finished at the horizon; "
            "extra.*_lower_bound_hours then censor those jobs at the horizon"
        ),
    }
    if args.merge and output.exists():
        # Keep what earlier sessions filed beside the runs (runs_before_*, their note).
        earlier = json.loads(output.read_text())
        payload = {**earlier, **{k: v for k, v in payload.items() if k != "note"}}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
