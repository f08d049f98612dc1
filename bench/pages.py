"""Benchmark: server time of every dashboard page and API endpoint on a month of lab history.

Seeds its own PostgreSQL database (default postgres://postgres@127.0.0.1:5432/gpulab_pages,
created and migrated if missing; every table is emptied first) with:
- 32 nodes × 8 GPUs of 3 device types, 60 students in 8 groups, 2 admins;
- 100,000 finished jobs over the last 30 days, placed by a small simulation so no GPU is
  ever held twice at once (allocations, four events each), about 60 running jobs on ~90 % of
  the GPUs, 2,000 pending jobs with reasons and queue positions;
- GPU metrics: per-minute roll-ups of the last 24 h for each device (368,640 rows), raw
  samples of the last 2 minutes, per-job roll-ups for the running jobs;
- a month of what `aggregates_update` samples every minute (queue and utilization
  samples; 7 days of 15-minute heatmap buckets), a day of scheduling rounds, audit entries.
Big tables are written with COPY. Then it times `dashboard.services.aggregates_update()`
from scratch (usage hours of the whole month) and once more (incremental, one minute
later), and loads each page `--repeats` times after `--warmup` loads with Django's test
Client, as a student and as an admin, timing the server side (the request through the whole
middleware stack, no network). Prints a table of p50/p95 and writes bench/results/pages.json.
Numbers, never asserts. A page whose view is still a placeholder reads "not implemented".

    .venv/bin/python bench/pages.py [--finished 100000] [--pending 2000] [--repeats 30]
    .venv/bin/python bench/pages.py --reuse   # measure again without seeding (~1.5 min less)
"""

from __future__ import annotations

import argparse
import bisect
import io
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpulab_pages"
NODES, GPUS_PER_NODE = 32, 8
TYPES = (("a100", 2.0), ("v100", 1.0), ("rtx3090", 1.2))
GROUPS, STUDENTS = 8, 60
HALF_LIFE_HOURS = 168.0  # the default GPULAB_USAGE_HALF_LIFE_HOURS
SIZES = (1, 1, 1, 1, 1, 2, 2, 4, 4, 8)  # mean 2.5 GPUs
MEAN_MINUTES = 30.0  # with SIZES and 100,000 jobs in 30 days: about 70 % of 256 GPUs busy


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
    # The test Client sends Host: testserver; the pages themselves are what is measured.
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,localhost,127.0.0.1"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class Progress:
    """Prints each seeding step with its time, so a slow step is visible as it happens."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.last = self.started

    def __call__(self, message: str) -> None:
        now = time.perf_counter()
        print(f"  [{now - self.started:6.1f} s] {message} (+{now - self.last:.1f} s)", flush=True)
        self.last = now


# --------------------------------------------------------------------------- COPY helpers


def _copy_text(value: object, *, as_json: bool = False) -> str:
    if value is None:
        return r"\N"
    if as_json:
        value = json.dumps(value)
    elif isinstance(value, bool):
        return "t" if value else "f"
    elif isinstance(value, datetime):
        return value.isoformat()
    elif not isinstance(value, str):
        return str(value)
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def copy_rows(
    table: str, columns: Sequence[str], rows: Iterable[Sequence[object]], *, plain: bool = False
) -> int:
    """COPY tuples into `table` (text format); returns the number of rows.

    `plain=True` is the fast path for the big metric tables: every value is a number or an
    already formatted timestamp string, never None and never a string needing escapes.
    """
    from django.db import connection

    buffer = io.StringIO()
    count = 0
    for row in rows:
        if plain:
            buffer.write("\t".join(map(str, row)))
        else:
            buffer.write("\t".join(_copy_text(value) for value in row))
        buffer.write("\n")
        count += 1
    buffer.seek(0)
    with connection.cursor() as cursor:
        cursor.cursor.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", buffer)
    return count


def copy_models(objects: Sequence[Any]) -> int:
    """COPY model instances, every concrete column (pk included: the caller numbers them).

    Field defaults come from the instances, so a column another change adds with a default
    is filled without touching this script.
    """
    from django.db import connection, models

    model = type(objects[0])
    fields = list(model._meta.concrete_fields)
    json_fields = {f.attname for f in fields if isinstance(f, models.JSONField)}
    buffer = io.StringIO()
    for obj in objects:
        buffer.write(
            "\t".join(
                _copy_text(getattr(obj, f.attname), as_json=f.attname in json_fields)
                for f in fields
            )
        )
        buffer.write("\n")
    buffer.seek(0)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    with connection.cursor() as cursor:
        cursor.cursor.copy_expert(f"COPY {model._meta.db_table} ({columns}) FROM STDIN", buffer)
    return len(objects)


def sequences_reset() -> None:
    """After COPY with explicit ids, move each identity sequence past the largest id."""
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection

    statements = connection.ops.sequence_reset_sql(no_style(), apps.get_models())
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def tables_empty() -> None:
    """Empty every table of the project (not migrations, content types or permissions)."""
    from django.db import connection

    keep = {"django_migrations", "django_content_type", "auth_permission"}
    tables = [t for t in connection.introspection.django_table_names(only_existing=True)]
    tables = [t for t in tables if t not in keep]
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE "
            + ", ".join(connection.ops.quote_name(t) for t in tables)
            + " RESTART IDENTITY CASCADE"
        )


# --------------------------------------------------------------------------- seeding


@dataclass
class Seeded:
    student: Any
    admin: Any
    student_job_id: int
    group_id: int
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Placed:
    """One finished job from the placement simulation (times in epoch seconds)."""

    index: int
    owner: int  # index into students
    size: int
    accepted: list[str]
    submit: float
    start: float
    end: float
    devices: list[int]  # device ids
    final: str


def _decay(seconds_ago: float) -> float:
    return 0.5 ** (max(seconds_ago, 0.0) / 3600.0 / HALF_LIFE_HOURS)


def seed(*, now: datetime, finished: int, pending: int, progress: Progress) -> Seeded:
    from django.apps import apps

    from accounts.choices import Role
    from accounts.models import LabGroup, User
    from cluster.models import Device, DeviceType, Node
    from jobs.models import Job
    from scheduler.selectors import scheduler_config_get

    rng = random.Random(2026)
    tables_empty()
    progress("tables emptied")

    # ---- cluster and people (small: the ORM is fine)
    types = [DeviceType.objects.create(name=name, speed=speed) for name, speed in TYPES]
    speed_of = {t.pk: t.speed for t in types}
    nodes = Node.objects.bulk_create(
        Node(
            name=f"{types[i % 3].name}-{i:02d}",
            address=f"10.0.1.{i}",
            last_heartbeat_at=now - timedelta(seconds=rng.uniform(1, 25)),
        )
        for i in range(NODES)
    )
    devices = Device.objects.bulk_create(
        Device(
            node=node,
            index=g,
            uuid=f"GPU-{node.name}-{g}",
            device_type=types[i % 3],
            model_name=types[i % 3].name.upper(),
            memory_mb=40_960,
        )
        for i, node in enumerate(nodes)
        for g in range(GPUS_PER_NODE)
    )
    type_of_device = {d.pk: d.device_type_id for d in devices}
    groups = LabGroup.objects.bulk_create(
        LabGroup(name=f"group{i}", weight=float(1 + i % 3), max_gpus=64 if i % 4 == 0 else None)
        for i in range(GROUPS)
    )
    students = User.objects.bulk_create(
        User(username=f"student{i:02d}", role=Role.STUDENT, default_group=groups[i % GROUPS])
        for i in range(STUDENTS)
    )
    admins = User.objects.bulk_create(
        User(username=f"admin{i}", role=Role.ADMIN, is_staff=True, is_superuser=True)
        for i in range(2)
    )
    membership = LabGroup.members.through
    membership.objects.bulk_create(
        membership(labgroup_id=groups[i % GROUPS].pk, user_id=user.pk)
        for i, user in enumerate(students)
    )
    group_of = {i: groups[i % GROUPS] for i in range(STUDENTS)}
    thresholds = scheduler_config_get().queue_thresholds
    progress(f"{NODES} nodes, {len(devices)} GPUs, {STUDENTS} students in {GROUPS} groups")

    # ---- finished jobs: arrivals over 30 days, each placed on the node that frees enough
    # GPUs first, so device time is never double-booked (as the real scheduler guarantees).
    window_start = (now - timedelta(days=30)).timestamp()
    window_end = (now - timedelta(hours=3)).timestamp()
    horizon = now.timestamp() - 60  # every finished job ended by a minute ago
    nodes_by_type: dict[str, list[int]] = defaultdict(list)
    for i in range(NODES):
        nodes_by_type[types[i % 3].name].append(i)
    free: list[list[tuple[float, int]]] = [
        [(window_start, devices[n * GPUS_PER_NODE + g].pk) for g in range(GPUS_PER_NODE)]
        for n in range(NODES)
    ]
    placed: list[Placed] = []
    span = window_end - window_start
    user_usage: dict[int, float] = defaultdict(float)
    for index in range(finished):
        submit = window_start + (index + rng.random()) * span / finished
        size = rng.choice(SIZES)
        accepted = rng.choice([[], [], [], ["a100"], ["a100", "v100"], ["v100", "rtx3090"]])
        candidates = (
            [n for name in accepted for n in nodes_by_type[name]] if accepted else range(NODES)
        )
        best = min(candidates, key=lambda n: free[n][size - 1][0])
        start = max(submit, free[best][size - 1][0]) + rng.uniform(2, 30)
        seconds = min(max(rng.expovariate(1.0 / (MEAN_MINUTES * 60)), 60.0), 12 * 3600.0)
        end = min(start + seconds, horizon)
        start = min(start, end)
        held = free[best][:size]
        free[best] = sorted([(end, device_id) for _, device_id in held] + free[best][size:])
        final = rng.choices(["SUCCEEDED", "FAILED", "CANCELLED"], weights=[88, 8, 4])[0]
        owner = rng.randrange(STUDENTS)
        service = (end - start) * sum(speed_of[type_of_device[d]] for _, d in held)
        user_usage[owner] += service * _decay(now.timestamp() - end)
        placed.append(
            Placed(index, owner, size, accepted, submit, start, end, [d for _, d in held], final)
        )
    progress(f"placed {finished:,} finished jobs")

    def when(epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, tz=UTC)

    def level(service: float) -> int:
        return bisect.bisect_right(thresholds, service)

    jobs: list[Job] = []
    allocations: list[tuple] = []
    events: list[tuple] = []
    next_event = 1

    def event(job_id: int, at: datetime, src: str, dst: str, actor: str, message: str) -> None:
        nonlocal next_event
        events.append((next_event, job_id, at, src, dst, actor, None, message))
        next_event += 1

    for job in placed:
        job_id = job.index + 1
        service = (job.end - job.start) * sum(speed_of[type_of_device[d]] for d in job.devices)
        submitted, started, ended = when(job.submit), when(job.start), when(job.end)
        jobs.append(
            Job(
                id=job_id,
                owner_id=students[job.owner].pk,
                group_id=group_of[job.owner].pk,
                name=f"train-{job_id}",
                image="nvcr.io/nvidia/pytorch:24.05-py3",
                command=["python", "train.py", "--seed", str(job_id)],
                num_gpus=job.size,
                accepted_types=job.accepted,
                state=job.final,
                reason="" if job.final == "SUCCEEDED" else f"Exited with code {job.index % 7 + 1}.",
                attempt=1,
                exit_code=0 if job.final == "SUCCEEDED" else 1,
                queue_level=level(service),
                queue_entered_at=submitted,
                attained_service=service,
                total_run_seconds=job.end - job.start,
                submitted_at=submitted,
                started_at=started,
                first_started_at=started,
                finished_at=ended,
                updated_at=ended,
            )
        )
        allocations += [(job_id, 1, d, started, ended) for d in job.devices]
        event(job_id, submitted, "", "PENDING", "user", f"Submitted: {job.size} GPU(s).")
        event(job_id, started, "PENDING", "STARTING", "scheduler", "Starting.")
        event(job_id, started + timedelta(seconds=4), "STARTING", "RUNNING", "agent", "Running.")
        event(job_id, ended, "RUNNING", job.final, "agent", "Exited.")

    # ---- running jobs: fill ~90 % of the nodes with one-node jobs of 8, 4, 2 and 1 GPUs,
    # each started after its devices were last released.
    last_end = {device_id: end for node_free in free for end, device_id in node_free}
    running_ids: list[int] = []
    job_id = finished
    for n in range(NODES):
        if rng.random() < 0.1:
            continue
        node_devices = [devices[n * GPUS_PER_NODE + g].pk for g in range(GPUS_PER_NODE)]
        while node_devices:
            width = min(rng.choice((8, 4, 2, 1)), len(node_devices))
            held, node_devices = node_devices[:width], node_devices[width:]
            job_id += 1
            owner = 0 if not running_ids else rng.randrange(STUDENTS)  # student00 runs one
            begin = max(
                now.timestamp() - rng.uniform(300, 8 * 3600), *(last_end[d] + 5 for d in held)
            )
            started = when(begin)
            service = (now.timestamp() - begin) * sum(speed_of[type_of_device[d]] for d in held)
            jobs.append(
                Job(
                    id=job_id,
                    owner_id=students[owner].pk,
                    group_id=group_of[owner].pk,
                    name=f"long-train-{job_id}",
                    image="nvcr.io/nvidia/pytorch:24.05-py3",
                    command=["torchrun", f"--nproc-per-node={width}", "train.py"],
                    num_gpus=width,
                    state="RUNNING",
                    attempt=1,
                    queue_level=level(service),
                    queue_entered_at=started,
                    submitted_at=started - timedelta(minutes=3),
                    started_at=started,
                    first_started_at=started,
                    updated_at=started,
                )
            )
            allocations += [(job_id, 1, d, started, None) for d in held]
            event(job_id, started - timedelta(minutes=3), "", "PENDING", "user", "Submitted.")
            event(job_id, started, "PENDING", "STARTING", "scheduler", "Starting.")
            event(
                job_id, started + timedelta(seconds=4), "STARTING", "RUNNING", "agent", "Running."
            )
            running_ids.append(job_id)

    # ---- pending jobs, in the order the last round left them, each with its reason
    reasons = (
        "WaitingForResources: needs {n} × a100 on one node",
        "Behind: {ahead} jobs ahead in queue {level}",
        "QuotaExceeded: group max GPUs 64",
        "TypeUnavailable: no free v100",
    )
    pending_ids = []
    for position in range(1, pending + 1):
        job_id += 1
        owner = rng.randrange(STUDENTS)
        size = rng.choice(SIZES)
        waiting = timedelta(seconds=rng.uniform(60, 48 * 3600))
        queue = 0 if rng.random() < 0.7 else 1
        since = now - waiting
        jobs.append(
            Job(
                id=job_id,
                owner_id=students[owner].pk,
                group_id=group_of[owner].pk,
                name=f"queued-{job_id}",
                image="pytorch/pytorch:2.4.0",
                command=["python", "sweep.py", f"--trial={position}"],
                num_gpus=size,
                state="PENDING",
                reason=reasons[position % len(reasons)].format(
                    n=size, ahead=position - 1, level=queue
                ),
                queue_position=position,
                queue_level=queue,
                queue_entered_at=since,
                pending_since=since,
                submitted_at=since,
                updated_at=now,
            )
        )
        event(job_id, since, "", "PENDING", "user", f"Submitted: {size} GPU(s).")
        pending_ids.append(job_id)
    progress(f"built {len(jobs):,} jobs, {len(allocations):,} allocations, {len(events):,} events")

    copy_models(jobs)
    copy_rows(
        "jobs_allocation", ("job_id", "attempt", "device_id", "started_at", "ended_at"), allocations
    )
    copy_rows(
        "jobs_jobevent",
        (
            "id",
            "job_id",
            "created_at",
            "from_state",
            "to_state",
            "actor",
            "actor_user_id",
            "message",
        ),
        events,
    )
    progress("copied jobs, allocations and events")

    # ---- fair-share usage as the services leave it (decayed as of now)
    group_usage: dict[int, float] = defaultdict(float)
    for owner, usage in user_usage.items():
        group_usage[group_of[owner].pk] += usage
    for owner, usage in user_usage.items():
        User.objects.filter(pk=students[owner].pk).update(usage=usage, usage_updated_at=now)
    for group in groups:
        LabGroup.objects.filter(pk=group.pk).update(
            usage=group_usage[group.pk], usage_updated_at=now
        )

    # ---- GPU metrics: 24 h of per-minute roll-ups per device, raw samples of 2 minutes
    busy = {device for _job, _attempt, device, _start, end in allocations if end is None}
    first_minute = (now - timedelta(hours=24)).replace(second=0, microsecond=0)
    minutes = [first_minute + timedelta(minutes=m) for m in range(24 * 60)]
    minute_texts = [minute.isoformat() for minute in minutes]
    noise = [round(rng.gauss(0, 12), 1) for _ in range(4099)]  # prime: no visible period

    def gpu_minutes() -> Iterable[tuple]:
        for device in devices:
            on = device.pk in busy
            base, memory, temperature, power = (
                (75.0, 30_000, 70, 250.0) if on else (8, 500, 38, 60.0)
            )
            for m, text in enumerate(minute_texts):
                utilization = min(100.0, max(0.0, base + noise[(m * 31 + device.pk) % 4099]))
                yield (device.pk, text, 4, utilization, memory, temperature, power)

    gpu_minute_rows = copy_rows(
        "agents_gpuminute",
        (
            "device_id",
            "minute",
            "samples",
            "utilization_avg",
            "memory_used_max_mb",
            "temperature_max_c",
            "power_avg_w",
        ),
        gpu_minutes(),
        plain=True,
    )
    copy_rows(
        "agents_gpusample",
        (
            "device_id",
            "at",
            "utilization_pct",
            "memory_used_mb",
            "memory_total_mb",
            "temperature_c",
            "power_w",
            "ecc_uncorrected",
            "xid_errors",
        ),
        (
            (
                d.pk,
                now - timedelta(seconds=s),
                rng.randint(60, 99) if d.pk in busy else 0,
                30_000,
                40_960,
                66,
                240.0,
                0,
                "[]",
            )
            for d in devices
            for s in (5, 35, 65, 95)
        ),
    )
    # Per-job use of the running jobs: per minute since they started (at most 24 h), and
    # raw heartbeat samples for the minute not rolled up yet.
    running_allocations = [(j, d, s) for j, _a, d, s, end in allocations if end is None]
    job_minute_rows = copy_rows(
        "agents_jobgpuminute",
        ("job_id", "device_id", "minute", "samples", "utilization_avg", "memory_used_max_mb"),
        (
            (job, device, text, 2, 40 + abs(noise[(m * 17 + job) % 4099]) * 4, 28_000)
            for job, device, started in running_allocations
            for m, (minute, text) in enumerate(zip(minutes, minute_texts, strict=True))
            if started <= minute < now - timedelta(minutes=1)
        ),
        plain=True,
    )
    copy_rows(
        "agents_jobgpusample",
        ("job_id", "attempt", "device_id", "at", "utilization_pct", "memory_used_mb"),
        (
            (job, 1, device, now - timedelta(seconds=s), rng.randint(40, 99), 28_000)
            for job, device, _ in running_allocations
            for s in (10, 40, 70)
        ),
    )
    progress(f"copied {gpu_minute_rows:,} GPU minutes and {job_minute_rows:,} job GPU minutes")

    # ---- what a month of per-minute aggregation runs leaves behind
    levels = len(thresholds) + 1
    per_type = {t.pk: sum(1 for d in devices if d.device_type_id == t.pk) for t in types}
    # (timestamp text, daily wave in [0.55, 0.95]) for each minute of the month
    month = [
        (
            moment.isoformat(),
            0.75 + 0.2 * math.sin(moment.timestamp() / 86400 * 2 * math.pi),
        )
        for moment in (now - timedelta(minutes=m) for m in range(30 * 24 * 60, 0, -1))
    ]
    copy_rows(
        "dashboard_queuesample",
        ("at", "level", "pending_jobs", "pending_gpus"),
        (
            (text, lvl, int(pending * wave / (lvl + 1)), int(2.5 * pending * wave / (lvl + 1)))
            for text, wave in month
            for lvl in range(levels)
        ),
        plain=True,
    )
    copy_rows(
        "dashboard_utilizationsample",
        ("at", "device_type_id", "devices", "schedulable", "allocated", "used"),
        (
            (text, type_id, total, total, int(total * wave), round(total * wave * 0.7, 3))
            for text, wave in month
            for type_id, total in per_type.items()
        ),
        plain=True,
    )
    first_bucket = (now - timedelta(days=7)).replace(minute=0, second=0, microsecond=0)
    # The aggregation rebuilds the last two buckets itself.
    bucket_texts = [
        (first_bucket + timedelta(minutes=15 * b)).isoformat() for b in range(7 * 24 * 4 - 2)
    ]
    bucket_rows = copy_rows(
        "dashboard_deviceutilizationbucket",
        ("device_id", "start", "utilization_avg", "samples"),
        (
            (d.pk, start, round(50 + noise[(b * 7 + d.pk) % 4099] * 3, 1) % 100, 60)
            for d in devices
            for b, start in enumerate(bucket_texts)
        ),
        plain=True,
    )
    progress(f"copied 30 days of queue/utilization samples, {bucket_rows:,} heatmap buckets")

    # ---- a day of scheduling rounds (one every 10 s) and the audit trail of quota edits
    from scheduler.models import SchedulingRound

    SchedulingRound.objects.bulk_create(
        (
            SchedulingRound(
                started_at=now - timedelta(seconds=10 * r),
                duration_ms=rng.uniform(20, 200),
                trigger="timer",
                outcome="applied",
                policy="las",
                pending_jobs=pending,
                running_jobs=len(running_ids),
                free_devices=rng.randint(0, 30),
                starts=rng.randint(0, 3),
                holds=pending,
            )
            for r in range(8640)
        ),
        batch_size=2000,
    )
    try:
        audit = apps.get_model("accounts", "AuditEntry")
    except LookupError:
        audit = None
    if audit is not None:
        audit.objects.bulk_create(
            (
                audit(
                    at=now - timedelta(minutes=37 * i),
                    actor=admins[0],
                    actor_username=admins[0].username,
                    target_kind="group" if i % 2 else "user",
                    target_name=groups[i % GROUPS].name
                    if i % 2
                    else students[i % STUDENTS].username,
                    target_id=groups[i % GROUPS].pk if i % 2 else students[i % STUDENTS].pk,
                    field="weight" if i % 3 else "max_gpus",
                    old_value=str(1 + i % 3),
                    new_value=str(2 + i % 3),
                )
                for i in range(2000)
            ),
            batch_size=2000,
        )
    sequences_reset()
    with_analyze()
    progress("rounds, audit entries, sequences, ANALYZE")
    return Seeded(
        student=students[0],
        admin=admins[0],
        student_job_id=running_ids[0],
        group_id=groups[0].pk,
        counts={
            "finished_jobs": finished,
            "running_jobs": len(running_ids),
            "pending_jobs": len(pending_ids),
            "allocations": len(allocations),
            "events": len(events),
            "gpu_minutes": gpu_minute_rows,
            "job_gpu_minutes": job_minute_rows,
            "devices": len(devices),
        },
    )


def seeded_reuse() -> Seeded:
    """The people and ids of an earlier seed; the aggregates are dropped to time a full build."""
    from accounts.models import LabGroup, User
    from dashboard.models import AggregatesState, UsageHour
    from jobs.models import Job

    student = User.objects.get(username="student00")
    UsageHour.objects.all().delete()
    AggregatesState.objects.all().delete()
    return Seeded(
        student=student,
        admin=User.objects.get(username="admin0"),
        student_job_id=Job.objects.filter(owner=student, state="RUNNING").order_by("pk")[0].pk,
        group_id=LabGroup.objects.get(name="group0").pk,
        counts={
            "finished_jobs": Job.objects.filter(finished_at__isnull=False).count(),
            "running_jobs": Job.objects.filter(state="RUNNING").count(),
            "pending_jobs": Job.objects.filter(state="PENDING").count(),
        },
    )


def with_analyze() -> None:
    # Fresh COPYs have no planner statistics until autovacuum gets to them; a real database
    # has them, so gather them now rather than time plans made blind.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


# --------------------------------------------------------------------------- measuring


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def targets(seeded: Seeded) -> list[tuple[str, str, bool]]:
    """(label, path, admin only) for every page and endpoint measured."""
    from django.urls import reverse

    return [
        ("jobs list", reverse("jobs:list"), False),
        ("job detail", reverse("jobs:detail", kwargs={"job_id": seeded.student_job_id}), False),
        ("submit form", reverse("jobs:submit"), False),
        ("queue", reverse("dashboard:queue"), False),
        ("cluster", reverse("dashboard:cluster"), False),
        ("utilization 24h", reverse("dashboard:utilization") + "?window=24h", False),
        ("utilization 30d", reverse("dashboard:utilization") + "?window=30d", False),
        ("fairness", reverse("dashboard:fairness"), False),
        ("usage report", reverse("dashboard:usage"), True),
        ("quota list", reverse("dashboard:quotas"), True),
        (
            "quota group edit",
            reverse("dashboard:quota-group", kwargs={"group_id": seeded.group_id}),
            True,
        ),
        ("audit log", reverse("dashboard:audit"), True),
        ("scheduler settings", reverse("dashboard:scheduler-settings"), True),
        ("api queue", "/api/v1/queue/", False),
        ("api cluster", "/api/v1/cluster/", False),
        ("api utilization", "/api/v1/utilization/", False),
        ("api fairness", "/api/v1/fairness/", False),
    ]


def new_aggregation_version() -> None:
    """What a new run of aggregates_update does to the figure caches: a new version.

    No warm-up follows (the periodic task would build the shared figures right away), so
    this is the load of a reader who arrives before the task has finished warming.
    """
    import uuid

    from dashboard.models import AggregatesState

    AggregatesState.objects.filter(pk=1).update(version=uuid.uuid4())


def new_aggregation_version_warmed() -> None:
    """A new run followed by the task's warm-up (untimed), as in production."""
    from dashboard.warm import figure_caches_warm

    new_aggregation_version()
    figure_caches_warm()


# Pages whose figures are cached per aggregation run, measured again as the first load
# after a run with the cache empty: the worst case, which the task's warm-up normally
# spares readers (students' own usage figures excepted: built on their first visit).
COLD_AFTER_RUN = ("queue", "utilization 24h", "utilization 30d")


def measure_one(
    client: Any, path: str, *, warmup: int, repeats: int, before_each: Any = None
) -> dict[str, object]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    try:
        response = client.get(path)
    except NotImplementedError:
        return {"status": "not implemented"}
    except Exception as exc:  # a broken page is reported, not fatal
        return {"status": f"error: {type(exc).__name__}: {exc}"[:200]}
    if response.status_code in (404, 405, 501):
        return {"status": f"not implemented ({response.status_code})"}
    if response.status_code != 200:
        return {"status": f"HTTP {response.status_code}"}
    for _ in range(warmup):
        client.get(path)
    samples = []
    for _ in range(repeats):
        if before_each is not None:
            before_each()
        clock = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - clock) * 1000)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    return {
        "status": "ok",
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(percentile(samples, 0.95), 1),
        "max_ms": round(max(samples), 1),
        "queries": len(queries),
        "kb": round(len(response.content) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure the data a previous run seeded (its clock has moved on since)",
    )
    args = parser.parse_args()
    setup_django(args.database_url)
    import logging

    # Placeholder views raise; their tracebacks are reported as "not implemented" instead.
    logging.disable(logging.CRITICAL)
    # WhiteNoise warns that STATIC_ROOT was never collected; the pages do not need it here.
    warnings.filterwarnings("ignore", message="No directory at")
    from django.test import Client
    from django.utils import timezone

    from dashboard.services import aggregates_update

    now = timezone.now()
    if args.reuse:
        seeded = seeded_reuse()
        seed_seconds = None
    else:
        print(f"seeding {args.finished:,} finished and {args.pending:,} pending jobs …", flush=True)
        progress = Progress()
        seeded = seed(now=now, finished=args.finished, pending=args.pending, progress=progress)
        seed_seconds = round(time.perf_counter() - progress.started, 1)

    clock = time.perf_counter()
    first = aggregates_update(now=now)
    first_ms = (time.perf_counter() - clock) * 1000
    clock = time.perf_counter()
    second = aggregates_update(now=now + timedelta(minutes=1))
    second_ms = (time.perf_counter() - clock) * 1000
    aggregates = {
        "first_full_ms": round(first_ms, 1),
        "first_usage_hours": first.usage_hours_rebuilt,
        "first_usage_rows": first.usage_rows,
        "incremental_ms": round(second_ms, 1),
        "incremental_usage_hours": second.usage_hours_rebuilt,
    }
    print(
        f"aggregates_update: first (whole month) {first_ms:,.0f} ms "
        f"({first.usage_hours_rebuilt} hours, {first.usage_rows:,} usage rows); "
        f"incremental {second_ms:,.0f} ms ({second.usage_hours_rebuilt} hours)",
        flush=True,
    )

    clients = {}
    for role, user in (("student", seeded.student), ("admin", seeded.admin)):
        client = Client(raise_request_exception=True)
        client.force_login(user)
        clients[role] = client
    results = []
    header = (
        f"{'page':<28} {'as':<8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'queries':>7} {'KB':>7}"
    )
    print(header)
    print("-" * len(header))
    plan = [(label, path, admin_only, None) for label, path, admin_only in targets(seeded)] + [
        (f"{label}, {name}", path, admin_only, hook)
        for name, hook in (
            ("after run", new_aggregation_version_warmed),
            ("cold", new_aggregation_version),
        )
        for label, path, admin_only in targets(seeded)
        if label in COLD_AFTER_RUN
    ]
    for label, path, admin_only, before_each in plan:
        for role in ("admin",) if admin_only else ("student", "admin"):
            row = {"page": label, "path": path, "as": role}
            row.update(
                measure_one(
                    clients[role],
                    path,
                    warmup=args.warmup,
                    repeats=args.repeats,
                    before_each=before_each,
                )
            )
            results.append(row)
            if row["status"] == "ok":
                print(
                    f"{label:<28} {role:<8} {row['p50_ms']:>8.1f} {row['p95_ms']:>8.1f} "
                    f"{row['max_ms']:>8.1f} {row['queries']:>7} {row['kb']:>7.1f}",
                    flush=True,
                )
            else:
                print(f"{label:<28} {role:<8} {row['status']}", flush=True)

    output = ROOT / "bench" / "results" / "pages.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "seed_seconds": seed_seconds,
                "data": seeded.counts,
                "repeats": args.repeats,
                "warmup": args.warmup,
                "aggregates_update": aggregates,
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {output.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
