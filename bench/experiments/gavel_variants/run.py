"""Exploratory (not gpulab policy): variants of the default on Gavel's 5.6 jobs/h cell.

Each variant is one full `run_cell` replay (scheduler/sim/gavel.py), in its own process so
module switches cannot leak. Results are appended to a JSON-lines file as they finish.
Usage: python3 bench/experiments/gavel_variants/run.py OUT.jsonl [--rate 5.6] [--users shared]
       [--only v1,v2] [--processes 12]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from scheduler.core.types import TIRESIAS_RULES, PlacementKind
from scheduler.sim.gavel import experiment_settings, run_cell

TIRESIAS = TIRESIAS_RULES
VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "default-w200": {"allox_window": 200},
    "default-w20": {"allox_window": 20},
    "tiresias-w200": {**TIRESIAS, "allox_window": 200},
    "default-coarse": {"queue_thresholds": (3600.0,)},
    "default-q4x": {"queue_thresholds": tuple(100.0 * 4**i for i in range(9))},
    "default-knob8": {"promote_knob": 8.0},
    "default-knob2": {"promote_knob": 2.0},
    "default-starve2h": {"starvation_seconds": 7200.0},
    "default-starve30m": {"starvation_seconds": 1800.0},
    "default-margin1": {"preempt_margin": 1},
    "default-nopatience": {"preempt_patience": 0.0},
    "default-fifoish": {"queue_thresholds": (3600.0, 36000.0), "promote_knob": 8.0},
    "tiresias-knob2": {**TIRESIAS, "promote_knob": 2.0},
}


def one(name: str, rate: float, users: str) -> dict[str, object]:
    settings = experiment_settings(PlacementKind.ALLOX, **VARIANTS[name])  # type: ignore[arg-type]
    run = run_cell(f"{name}/{users}", settings, jobs_per_hour=rate, users=users)
    return asdict(run)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--rate", type=float, default=5.6)
    parser.add_argument("--users", default="shared")
    parser.add_argument("--only", default="")
    parser.add_argument("--processes", type=int, default=12)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    with ProcessPoolExecutor(args.processes) as pool:
        futures = {pool.submit(one, n, args.rate, args.users): n for n in names}
        for future in as_completed(futures):
            with open(args.out, "a") as handle:
                handle.write(json.dumps(future.result(), default=str) + "\n")


if __name__ == "__main__":
    main()
