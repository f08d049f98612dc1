"""Latency of one scheduling round (`decide`) on a big, busy, heterogeneous cluster.

Setting (issue 3): 128 nodes × 8 GPUs of 3 device types (a100 ×2.0, v100 ×1.0, rtx3090
×0.8 relative speed), the cluster ~90 % held by running jobs, and 1,000 or 10,000 pending
jobs from 60 users, in two queues, with per-type throughputs. Policies: `las` with best-fit
placement, and `las` + AlloX. Targets on a 2-core machine: median ≤ 50 ms at 10,000 pending
for `las`, ≤ 250 ms with AlloX.

Two timings per case:
- `policy`: the registered policy function alone (what the target is about);
- `decide`: `scheduler.policies.decide`, i.e. the policy plus the invariant check, which is
  what the live loop and the simulator call.

Usage: .venv/bin/python bench/policy_round.py [--repeats N] [--pending 1000,10000]
Prints a table and writes bench/results/policy_round.json. Numbers are never asserted.
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
import time
from dataclasses import replace

from scheduler.core.accounting import queue_level_for
from scheduler.core.types import (
    Account,
    Device,
    Job,
    JobPhase,
    Node,
    PlacementKind,
    SchedulerSettings,
    Snapshot,
)

TYPES = (("a100", 2.0), ("v100", 1.0), ("rtx3090", 0.8))
MODELS = {  # throughput relative to the reference, per type (Gavel-like spreads)
    "resnet50": {"a100": 2.4, "v100": 1.0, "rtx3090": 0.7},
    "transformer": {"a100": 1.8, "v100": 1.0, "rtx3090": 0.9},
    "lm": {"a100": 2.0, "v100": 1.0, "rtx3090": 0.6},
    "recommendation": {"a100": 1.1, "v100": 1.0, "rtx3090": 1.2},
    "cyclegan": {"a100": 2.6, "v100": 1.0, "rtx3090": 0.5},
}


# Stored levels as the apply step leaves them (steady state: no mass re-sorting).
THRESHOLDS = SchedulerSettings().queue_thresholds


def build_snapshot(
    pending: int, placement: PlacementKind, *, seed: int = 0, nodes: int = 128, gpus: int = 8
) -> Snapshot:
    """A busy cluster (~90 % held) with `pending` waiting jobs."""
    rng = random.Random(seed)
    devices: list[Device] = []
    node_list: list[Node] = []
    for n in range(nodes):
        device_type, speed = TYPES[n % len(TYPES)]
        name = f"{device_type}-{n:03d}"
        node_list.append(Node(name=name))
        devices.extend(
            Device(id=len(devices), node=name, device_type=device_type, speed=speed)
            for _ in range(gpus)
        )
    users = [f"user{u:02d}" for u in range(60)]
    now = 1_000_000.0
    jobs: list[Job] = []
    # Running jobs fill nodes from the start until ~90 % of the devices are held.
    by_node: dict[str, list[Device]] = {}
    for device in devices:
        by_node.setdefault(device.node, []).append(device)
    target = int(0.9 * len(devices))
    held = 0
    job_id = 0
    for name in sorted(by_node):
        free = list(by_node[name])
        while free and held < target:
            size = min(rng.choice([1, 1, 1, 2, 4, 8]), len(free))
            taken, free = free[:size], free[size:]
            model = rng.choice(list(MODELS))
            speed = sum(d.speed for d in taken)
            ran = rng.uniform(60, 20_000)
            jobs.append(
                Job(
                    id=job_id,
                    user=rng.choice(users),
                    group=None,
                    num_gpus=size,
                    submit_time=now - ran - rng.uniform(0, 5000),
                    phase=JobPhase.RUNNING,
                    devices=tuple(d.id for d in taken),
                    attained_service=speed * ran,
                    service_since_promotion=speed * ran,
                    executed_since_promotion=ran,
                    queue_level=queue_level_for(speed * ran, THRESHOLDS),
                    queue_entered_at=now - ran,
                    started_at=now - ran,
                    model=model,
                    throughputs=tuple(sorted(MODELS[model].items())),
                )
            )
            held += size
            job_id += 1
    for _ in range(pending):
        size = rng.choice([1, 1, 1, 1, 2, 2, 4, 8, 16])
        model = rng.choice(list(MODELS))
        waited = rng.uniform(0, 50_000)
        ran = rng.choice([0.0, 0.0, rng.uniform(100, 10_000)])
        jobs.append(
            Job(
                id=job_id,
                user=rng.choice(users),
                group=None,
                num_gpus=size,
                submit_time=now - waited - ran,
                phase=JobPhase.PENDING,
                attained_service=ran * size,
                service_since_promotion=ran * size,
                executed_since_promotion=ran,
                waiting_since_promotion=waited,
                queue_level=queue_level_for(ran * size, THRESHOLDS),
                pending_since=now - waited,
                queue_entered_at=now - waited,
                model=model,
                throughputs=tuple(sorted(MODELS[model].items())),
            )
        )
        job_id += 1
    settings = SchedulerSettings(policy="las", placement=placement)
    accounts = tuple(Account(name=u, usage=rng.uniform(0, 1e6)) for u in users)
    finished = tuple(rng.lognormvariate(7.7, 2.0) for _ in range(1000))
    return Snapshot(
        now=now,
        jobs=tuple(jobs),
        devices=tuple(devices),
        nodes=tuple(node_list),
        users=accounts,
        settings=settings,
        finished_job_sizes=finished,
    )


def time_calls(function, snapshot: Snapshot, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Milliseconds per call; each call gets a fresh copy of the snapshot's lazy indexes."""
    times = []
    for _ in range(repeats):
        fresh = replace(snapshot)  # every field, but no cached indexes
        started = time.perf_counter()
        function(fresh)
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per case [7]")
    parser.add_argument("--pending", default="1000,10000", help="pending job counts")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "policy_round.json")
    )
    options = parser.parse_args(argv)
    from scheduler import policies

    cases = [("las", PlacementKind.BEST_FIT, 50.0), ("las+allox", PlacementKind.ALLOX, 250.0)]
    rows = []
    header = (
        f"{'case':<12}{'pending':>9}{'jobs':>8}{'policy p50 ms':>15}{'p90':>9}"
        f"{'decide p50 ms':>15}{'target':>9}"
    )
    print(header)
    print("-" * len(header))
    for pending in (int(p) for p in options.pending.split(",")):
        for label, placement, target in cases:
            snapshot = build_snapshot(pending, placement)
            policy = policies.POLICIES[snapshot.settings.policy]
            policy(snapshot)  # warm-up: imports, caches, the Gittins prior
            policy_ms = time_calls(policy, snapshot, options.repeats)
            decide_ms = time_calls(policies.decide, snapshot, max(3, options.repeats // 2))
            row = {
                "case": label,
                "placement": placement.value,
                "pending": pending,
                "jobs": len(snapshot.jobs),
                "devices": len(snapshot.devices),
                "policy_median_ms": statistics.median(policy_ms),
                "policy_p90_ms": sorted(policy_ms)[int(0.9 * (len(policy_ms) - 1))],
                "decide_median_ms": statistics.median(decide_ms),
                "target_ms_at_10000": target,
                "samples_ms": policy_ms,
            }
            rows.append(row)
            print(
                f"{label:<12}{pending:>9}{len(snapshot.jobs):>8}{row['policy_median_ms']:>15.1f}"
                f"{row['policy_p90_ms']:>9.1f}{row['decide_median_ms']:>15.1f}{target:>9.0f}"
            )
    document = {
        "benchmark": "policy_round",
        "cluster": "128 nodes x 8 GPUs, types a100/v100/rtx3090, ~90% held",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": __import__("os").cpu_count(),
        "rows": rows,
    }
    out = Path(options.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
