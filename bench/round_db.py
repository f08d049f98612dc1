"""Benchmark: one full scheduling round (snapshot + decide + apply) on PostgreSQL.

10,000 pending jobs and 1,024 GPUs (128 nodes × 8, three device types). Two scenarios:
- `steady`: the cluster is already full of running jobs (the normal state of a busy lab);
  rounds re-read everything, decide, and rewrite what changed.
- `fill`: the cluster is empty and the round starts as many jobs as fit (a cold start).

Uses its own database (default postgres://postgres@127.0.0.1:5432/gpulab_bench, created if
missing). Prints a table and writes bench/results/round_db.json. Numbers, never asserts.

    .venv/bin/python bench/round_db.py [--pending 10000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpulab_bench"


def setup_django(database_url: str) -> None:
    import psycopg2

    name = database_url.rsplit("/", 1)[1]
    admin = psycopg2.connect(database_url.rsplit("/", 1)[0] + "/postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
    os.environ["GPULAB_SCHEDULER_MODE"] = "off"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# Pending jobs run one of this many programs, each measured before on every device type:
# the snapshot reads those measurements (agents.selectors.measured_rates) every round.
PROGRAMS = 20
HISTORY_ATTEMPTS = 3000


def progress_history(templates, types, now) -> None:  # type: ignore[no-untyped-def]
    """Finished jobs of the pending jobs' programs, with measured attempts on each type."""
    from agents.models import JobProgress
    from jobs.models import Job

    finished = Job.objects.bulk_create(
        Job(
            owner=template.owner,
            name="finished",
            image=template.image,
            command=template.command,
            num_gpus=template.num_gpus,
            state="SUCCEEDED",
        )
        for template in (templates[i % len(templates)] for i in range(HISTORY_ATTEMPTS // 3))
    )
    JobProgress.objects.bulk_create(
        JobProgress(
            job=job,
            attempt=attempt + 1,
            device_type=device_type,
            first_progress=0.0,
            first_at=now - timedelta(hours=2),
            last_progress=3600.0 * device_type.speed * (1 + job.pk % 7),
            last_at=now - timedelta(hours=1),
        )
        for job in finished
        for attempt, device_type in enumerate(types)
    )


def populate(*, pending: int, fill_running: bool) -> None:
    """Reset the tables and write the cluster, the people and the jobs in bulk."""
    from django.db import connection
    from django.utils import timezone

    from accounts.models import LabGroup, User
    from cluster.models import Device, DeviceType, Node
    from jobs.models import Allocation, Job

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE agents_jobprogress, jobs_allocation, jobs_jobevent, jobs_job, "
            "cluster_device, cluster_node, cluster_devicetype, accounts_labgroup_members, "
            "accounts_devicetypequota, accounts_apitoken, scheduler_schedulinground, "
            "accounts_labgroup, accounts_user "
            "RESTART IDENTITY CASCADE"
        )
    types = [
        DeviceType.objects.create(name=name, speed=speed)
        for name, speed in (("a100", 2.0), ("v100", 1.0), ("rtx3090", 1.2))
    ]
    nodes = Node.objects.bulk_create(
        Node(name=f"n{i:03d}", address=f"10.0.0.{i}") for i in range(128)
    )
    devices = Device.objects.bulk_create(
        Device(node=node, index=g, uuid=f"GPU-{node.name}-{g}", device_type=types[i % 3])
        for i, node in enumerate(nodes)
        for g in range(8)
    )
    groups = LabGroup.objects.bulk_create(
        LabGroup(name=f"g{i}", weight=1 + i % 3) for i in range(5)
    )
    users = User.objects.bulk_create(User(username=f"u{i:03d}", weight=1.0) for i in range(50))
    # User k's jobs are charged to group k % 5, so k is its member (a job of a user who
    # is not is held as InvalidAccount, and the round would start nothing).
    LabGroup.members.through.objects.bulk_create(
        LabGroup.members.through(labgroup=groups[k % 5], user=user) for k, user in enumerate(users)
    )
    now = timezone.now()
    sizes = [1, 1, 1, 2, 2, 4, 8]
    jobs = Job.objects.bulk_create(
        Job(
            owner=users[i % 50],
            group=groups[i % 5],
            name=f"job{i}",
            image="pytorch/pytorch:2.4.0",
            command=["python", "train.py", f"--config={i % PROGRAMS}"],
            num_gpus=sizes[i % len(sizes)],
            accepted_types=[] if i % 4 else ["a100", "v100"],
            queue_entered_at=now - timedelta(seconds=pending - i),
            pending_since=now - timedelta(seconds=pending - i),
        )
        for i in range(pending)
    )
    for job in jobs:  # submitted_at is auto_now_add: spread it like real arrivals
        job.submitted_at = now - timedelta(seconds=pending - job.pk)
    Job.objects.bulk_update(jobs, ["submitted_at"], batch_size=2000)
    progress_history(jobs[: len(sizes) * PROGRAMS], types, now)
    if not fill_running:
        return
    # Fill every GPU with running one-node jobs of 8, 4, 2 and 1 GPUs.
    running, allocations, cursor_device = [], [], 0
    started = now - timedelta(minutes=30)
    while cursor_device < len(devices):
        width = [8, 4, 2, 1][len(running) % 4]
        width = min(width, 8 - cursor_device % 8)
        job = Job(
            owner=users[len(running) % 50],
            group=groups[len(running) % 5],
            name="running",
            image="pytorch/pytorch:2.4.0",
            command=["sleep", "6000"],
            num_gpus=width,
            state="RUNNING",
            attempt=1,
            started_at=started,
            queue_entered_at=started,
        )
        running.append((job, devices[cursor_device : cursor_device + width]))
        cursor_device += width
    created = Job.objects.bulk_create(job for job, _ in running)
    for job, held in zip(created, (held for _, held in running), strict=True):
        allocations += [Allocation(job=job, attempt=1, device=d, started_at=started) for d in held]
    Allocation.objects.bulk_create(allocations)


def measure(*, placement: str, rounds: int, scenario: str, pending: int) -> dict[str, object]:
    from scheduler.models import SchedulerConfig
    from scheduler.services import scheduling_round_run

    populate(pending=pending, fill_running=scenario == "steady")
    SchedulerConfig.objects.update_or_create(
        pk=1, defaults={"placement": placement, "policy": "las"}
    )
    samples, parts, starts = [], [], []
    for _ in range(rounds if scenario == "steady" else 1):
        clock = time.perf_counter()
        record = scheduling_round_run()
        samples.append((time.perf_counter() - clock) * 1000)
        parts.append(record.timings_ms)
        starts.append(record.starts)
    ordered = sorted(samples)
    return {
        "scenario": scenario,
        "placement": placement,
        "pending_jobs": pending,
        "gpus": 1024,
        "rounds": len(samples),
        "median_ms": round(statistics.median(samples), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "max_ms": round(ordered[-1], 1),
        "median_parts_ms": {k: round(statistics.median(p[k] for p in parts), 1) for k in parts[0]},
        "starts_per_round": starts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    setup_django(args.database_url)
    import logging

    logging.disable(logging.WARNING)
    results = []
    for scenario in ("steady", "fill"):
        for placement in ("best-fit", "allox"):
            result = measure(
                placement=placement, rounds=args.rounds, scenario=scenario, pending=args.pending
            )
            results.append(result)
            print(
                f"{scenario:<7} {placement:<9} pending={args.pending:<6} "
                f"rounds={result['rounds']:<3} "
                f"median={result['median_ms']:>8.1f} ms  p95={result['p95_ms']:>8.1f} ms  "
                f"parts={result['median_parts_ms']}  starts={result['starts_per_round'][:3]}",
                flush=True,
            )
    output = ROOT / "bench" / "results" / "round_db.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {"machine": platform.platform(), "cpus": os.cpu_count(), "results": results}, indent=2
        )
    )
    print(f"wrote {output.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
