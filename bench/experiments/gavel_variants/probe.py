"""Exploratory (not gpulab policy): one Gavel cell with a per-round probe of placement quality.

Replays `run_cell` (scheduler/sim/gavel.py) with the live `decide` wrapped, and after every
round records what runs until the next one. Reported over the time some job waits for
capacity after the round ("under a queue"):

- `price_efficiency`: time-weighted speed per price of each running job on its type against
  its best type, at the static prices of Gavel's workload (the LP of
  `scheduler/policies/prices.py` over the 26 job types, equal work each); 1.0 = every job
  where the optimal fractional allocation would put it;
- `busy_fraction`: devices held / all devices;
- `work_rate`: V100-hours of work done per hour (the 5.6 jobs/h cell offers 94).

With `--by-model`, also average JCT, queueing and ideal time per job type over the window.

Usage: .venv/bin/python bench/experiments/gavel_variants/probe.py [--rate 5.6]
       [--users shared] [--settings '{"allox_efficiency_gate": 0.0}'] [--by-model]
Prints one JSON line (append it to a .jsonl to keep it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from scheduler.core.types import Decisions, PlacementKind, Snapshot
from scheduler.policies import decide as policy_decide
from scheduler.policies.prices import backlog_prices
from scheduler.sim.gavel import JOB_TABLE, WINDOW, experiment_settings, generate_jobs, run_cell
from scheduler.sim.throughputs import gavel_cluster, load_throughputs


def static_prices() -> dict[str, float]:
    """Prices of Gavel's cluster for its workload mix (equal work per job type)."""
    table = load_throughputs()
    profiles = [(dict(table.relative(model, 1)), 1.0) for model, _ in JOB_TABLE]
    prices = backlog_prices(profiles, gavel_cluster(None, table=table).devices)
    assert prices is not None
    return prices.prices


class Probe:
    """Wraps `decide`; integrates what runs between rounds while some job waits."""

    def __init__(self, prices: dict[str, float]) -> None:
        self.prices = prices
        self.last: float | None = None
        self.running: list[tuple[str, dict[str, float]]] = []
        self.waiting_after = 0
        self.queue_time = self.total_time = 0.0
        self.efficiency = self.work = self.busy = 0.0
        self.devices = 0

    def __call__(self, snapshot: Snapshot) -> Decisions:
        decisions = policy_decide(snapshot)
        now = snapshot.now
        self.devices = len(snapshot.devices)
        if self.last is not None:
            dt = now - self.last
            self.total_time += dt
            if self.waiting_after > 0:
                self.queue_time += dt
                for device_type, speeds in self.running:
                    best = max(s / self.prices[t] for t, s in speeds.items())
                    speed = speeds.get(device_type, 0.0)
                    self.efficiency += dt * (speed / self.prices[device_type]) / best
                    self.work += dt * speed
                    self.busy += dt
        self.last = now
        device_type = {d.id: d.device_type for d in snapshot.devices}
        jobs = snapshot.job_by_id
        preempted = {p.job_id for p in decisions.preemptions}
        self.running = [
            (device_type[job.devices[0]], dict(job.throughputs))
            for job in snapshot.jobs
            if job.is_running and job.devices and job.id not in preempted
        ] + [
            (device_type[start.device_ids[0]], dict(jobs[start.job_id].throughputs))
            for start in decisions.starts
        ]
        waiting = sum(1 for job in snapshot.jobs if not job.is_running)
        self.waiting_after = waiting + len(preempted) - len(decisions.starts)
        return decisions

    def summary(self) -> dict[str, float]:
        queue = max(self.queue_time, 1e-9)
        return {
            "queue_time_fraction": round(self.queue_time / max(self.total_time, 1e-9), 3),
            "price_efficiency": round(self.efficiency / max(self.busy, 1e-9), 4),
            "busy_fraction": round(self.busy / queue / max(self.devices, 1), 4),
            "work_rate_v100_hours_per_hour": round(self.work / queue, 2),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=5.6)
    parser.add_argument("--users", default="shared")
    parser.add_argument("--settings", default="{}", help="SchedulerSettings overrides (JSON)")
    parser.add_argument("--by-model", action="store_true")
    args = parser.parse_args()
    overrides = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in json.loads(args.settings).items()
    }
    probe = Probe(static_prices())
    settings = experiment_settings(PlacementKind.ALLOX, **overrides)
    records: list = []
    run = run_cell(
        "probe",
        settings,
        jobs_per_hour=args.rate,
        users=args.users,
        decide=probe,
        records_out=records if args.by_model else None,
    )
    line: dict[str, object] = {
        "rate": args.rate,
        "users": args.users,
        "settings": json.loads(args.settings),
        "avg_jct_hours": round(run.avg_jct_hours, 2),
        "worst_jct_hours": round(run.worst_jct_hours, 1),
        "unfinished": run.unfinished,
        "avg_jct_lower_bound_hours": round(run.extra["avg_jct_lower_bound_hours"], 2),
        "window_preemptions": run.extra["window_preemptions"],
        "window_avg_queueing_hours": round(run.extra["window_avg_queueing_hours"], 2),
        **probe.summary(),
    }
    if args.by_model:
        by_model: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        model_of = {job.index: job.model for job in generate_jobs(jobs_per_hour=args.rate, num_jobs=WINDOW[1])}
        for record in records:
            if WINDOW[0] <= record.id < WINDOW[1] and record.jct is not None:
                row = by_model[model_of[record.id]]
                row[0] += 1
                row[1] += record.jct / 3600.0
                row[2] += record.queueing_delay / 3600.0
                row[3] += record.ideal_runtime / 3600.0
        line["by_model"] = {
            model: {
                "jobs": int(n),
                "avg_jct_hours": round(jct / n, 1),
                "avg_queueing_hours": round(queueing / n, 1),
                "avg_ideal_hours": round(ideal / n, 1),
            }
            for model, (n, jct, queueing, ideal) in sorted(by_model.items())
        }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
