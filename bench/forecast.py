"""Cost of one start-time forecast (`scheduler.sim.forecast.forecast_starts`).

The live forecast (`scheduler.forecast_services`, every minute) replays the snapshot
forward through the configured policy until every pending job it keeps has started
(at most GPULAB_FORECAST_MAX_JOBS = 300 nearest the head of the line, by default), within
GPULAB_FORECAST_BUDGET_SECONDS = 20 s of computing. This measures how long that replay
takes on `bench/policy_round.py`'s cluster: 128 nodes × 8 GPUs of 3 types, ~90 % held,
and 100, 300 or 1,000 pending jobs; running jobs have U(60 s, 6 h) left and pending jobs
run a log-normal time around 1 h. No budget here: the full replay is timed, and the
table says whether it would have fitted in the default budget.

Usage: .venv/bin/python bench/forecast.py [--pending 100,300,1000] [--repeats 3]
Prints a table and writes bench/results/forecast.json. Numbers are never asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import platform
import random
import statistics

from bench.policy_round import build_snapshot
from scheduler.core.types import JobPhase, PlacementKind, Snapshot
from scheduler.sim.forecast import forecast_starts

DEFAULT_BUDGET_SECONDS = 20.0
HORIZON_SECONDS = 7 * 24 * 3600.0
TICK_SECONDS = 10.0


def work_left(snapshot: Snapshot, *, seed: int = 0) -> dict[int, float]:
    rng = random.Random(seed)
    return {
        job.id: (
            rng.uniform(60, 6 * 3600)
            if job.phase is JobPhase.RUNNING
            else min(rng.lognormvariate(8.2, 1.0), 7 * 24 * 3600)
        )
        for job in snapshot.jobs
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", default="100,300,1000", help="pending job counts")
    parser.add_argument("--repeats", type=int, default=3, help="timed forecasts per case [3]")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "forecast.json"))
    options = parser.parse_args(argv)
    cases = [("las", PlacementKind.BEST_FIT), ("las+allox", PlacementKind.ALLOX)]
    header = (
        f"{'case':<12}{'pending':>9}{'estimated':>11}{'rounds':>8}{'median s':>10}"
        f"{'max s':>8}{'ms/round':>10}  in 20 s budget"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for pending in (int(p) for p in options.pending.split(",")):
        for label, placement in cases:
            snapshot = build_snapshot(pending, placement)
            work = work_left(snapshot)
            seconds = []
            forecast = None
            for _ in range(options.repeats):
                forecast = forecast_starts(
                    snapshot,
                    work_left=work,
                    stopping_left=60.0,
                    horizon=HORIZON_SECONDS,
                    tick=TICK_SECONDS,
                )
                seconds.append(forecast.wall_seconds)
            assert forecast is not None
            median = statistics.median(seconds)
            row = {
                "case": label,
                "pending": pending,
                "devices": len(snapshot.devices),
                "estimated": len(forecast.starts),
                "rounds": forecast.rounds,
                "stop_reason": forecast.stop_reason,
                "median_seconds": median,
                "max_seconds": max(seconds),
                "ms_per_round": median * 1000 / max(forecast.rounds, 1),
                "fits_default_budget": max(seconds) <= DEFAULT_BUDGET_SECONDS,
                "samples_seconds": seconds,
            }
            rows.append(row)
            print(
                f"{label:<12}{pending:>9}{row['estimated']:>11}{row['rounds']:>8}"
                f"{median:>10.2f}{row['max_seconds']:>8.2f}{row['ms_per_round']:>10.1f}  "
                f"{'yes' if row['fits_default_budget'] else 'no'}"
            )
    result = {
        "benchmark": "forecast",
        "machine": {"python": platform.python_version(), "processor": platform.processor()},
        "horizon_seconds": HORIZON_SECONDS,
        "tick_seconds": TICK_SECONDS,
        "rows": rows,
    }
    Path(options.out).parent.mkdir(parents=True, exist_ok=True)
    Path(options.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {options.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
