"""The periodic aggregation behind every dashboard figure (style.md rule 24).

`aggregates_update` is idempotent and incremental: run it every minute (Celery beat does),
run it twice, or skip a few runs; each run rebuilds exactly the rows that may have changed.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Min, Q, Sum
from django.utils import timezone

from agents.models import GpuMinute, GpuSample
from cluster.choices import NodeState
from cluster.models import Device
from jobs.choices import HOLDING_STATES, JobState
from jobs.models import Allocation, Job

from .models import (
    AggregatesState,
    DeviceUtilizationBucket,
    QueueSample,
    UsageHour,
    UtilizationSample,
)

HOUR = timedelta(hours=1)
BUCKET = timedelta(minutes=15)
# An allocation row commits a moment after its `started_at`, and an agent may report an exit
# a little late: hours this close to now are rebuilt again on the next run.
SETTLE_MARGIN = timedelta(minutes=10)
# A device whose last heartbeat is older than this counts as not reporting (used = 0).
FRESH_READING = timedelta(minutes=2)
SAMPLE_RETENTION = timedelta(days=30)
BUCKET_RETENTION = timedelta(days=7)


@dataclass(frozen=True)
class AggregatesResult:
    usage_hours_rebuilt: int
    usage_rows: int
    queue_rows: int
    utilization_rows: int
    bucket_rows: int
    duration_ms: float


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def floor_bucket(moment: datetime) -> datetime:
    return moment.replace(minute=moment.minute - moment.minute % 15, second=0, microsecond=0)


def aggregates_update(*, now: datetime | None = None) -> AggregatesResult:
    """Bring every dashboard aggregate up to `now`, in one transaction.

    1. Usage hours: every hour from the first one that may still change is rebuilt from the
       allocations that overlap it (live ones counted up to `now`).
    2. A queue sample per Tiresias level and a utilization sample per device type.
    3. The 15-minute utilization buckets since the last run, from the minute roll-ups.
    4. Retention: samples older than 30 days and buckets older than 7 days are deleted.
    """
    started = time.perf_counter()
    now = now or timezone.now()
    with transaction.atomic():
        # The row lock serializes concurrent runs (two beats, a manual run): the second waits
        # and then rebuilds from where the first left off.
        state, _ = AggregatesState.objects.select_for_update().get_or_create(pk=1)
        rebuilt_hours, usage_rows = _usage_hours_rebuild(state=state, now=now)
        queue_rows = _queue_sample(now=now)
        utilization_rows = _utilization_sample(now=now)
        bucket_rows = _utilization_buckets_rebuild(now=now, last_run=state.updated_at)
        QueueSample.objects.filter(at__lt=now - SAMPLE_RETENTION).delete()
        UtilizationSample.objects.filter(at__lt=now - SAMPLE_RETENTION).delete()
        DeviceUtilizationBucket.objects.filter(start__lt=now - BUCKET_RETENTION).delete()
        duration_ms = (time.perf_counter() - started) * 1000
        state.usage_rebuilt_from = floor_hour(now - SETTLE_MARGIN)
        state.updated_at = now
        state.last_duration_ms = duration_ms
        state.version = uuid.uuid4()
        state.save()
    return AggregatesResult(
        usage_hours_rebuilt=rebuilt_hours,
        usage_rows=usage_rows,
        queue_rows=queue_rows,
        utilization_rows=utilization_rows,
        bucket_rows=bucket_rows,
        duration_ms=duration_ms,
    )


def _usage_hours_rebuild(*, state: AggregatesState, now: datetime) -> tuple[int, int]:
    """Rebuild UsageHour rows for the hours [from, now]. Returns (hours, rows written).

    Hours before `from` are final: every allocation overlapping them had started by the time
    they were last rebuilt, after they had closed, so its share of them cannot change.
    """
    rebuild_from = state.usage_rebuilt_from
    if rebuild_from is None:
        first = Allocation.objects.aggregate(first=Min("started_at"))["first"]
        if first is None:
            return 0, 0
        rebuild_from = floor_hour(first)
    rebuild_from = min(rebuild_from, floor_hour(now))
    overlapping = Allocation.objects.filter(started_at__lt=now).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=rebuild_from)
    )
    totals: dict[tuple[datetime, int, int | None, int], list[float]] = defaultdict(
        lambda: [0.0, 0.0]
    )
    rows = overlapping.values_list(
        "job__owner_id",
        "job__group_id",
        "device__device_type_id",
        "device__device_type__speed",
        "started_at",
        "ended_at",
    ).iterator(chunk_size=5000)
    for user_id, group_id, type_id, speed, started_at, ended_at in rows:
        begin = max(started_at, rebuild_from)
        end = min(ended_at or now, now)
        hour = floor_hour(begin)
        while hour < end:
            seconds = (min(end, hour + HOUR) - max(begin, hour)).total_seconds()
            if seconds > 0:
                cell = totals[(hour, user_id, group_id, type_id)]
                cell[0] += seconds
                cell[1] += seconds * speed
            hour += HOUR
    UsageHour.objects.filter(hour__gte=rebuild_from).delete()
    UsageHour.objects.bulk_create(
        [
            UsageHour(
                hour=hour,
                user_id=user_id,
                group_id=group_id,
                device_type_id=type_id,
                gpu_seconds=gpu_seconds,
                service=service,
            )
            for (hour, user_id, group_id, type_id), (gpu_seconds, service) in totals.items()
        ],
        batch_size=2000,
    )
    hours = int((floor_hour(now) - rebuild_from) / HOUR) + 1
    return hours, len(totals)


def _queue_sample(*, now: datetime) -> int:
    # Imported here: the dashboard reads the scheduler's settings, never the reverse.
    from scheduler.selectors import scheduler_config_get

    levels = len(scheduler_config_get().queue_thresholds) + 1
    counts = {
        row["queue_level"]: row
        for row in Job.objects.filter(state=JobState.PENDING)
        .order_by()
        .values("queue_level")
        .annotate(jobs=Count("id"), gpus=Sum("num_gpus"))
    }
    samples = [
        QueueSample(
            at=now,
            level=level,
            pending_jobs=counts.get(level, {}).get("jobs", 0),
            pending_gpus=counts.get(level, {}).get("gpus") or 0,
        )
        for level in range(max(levels, max(counts, default=-1) + 1))
    ]
    QueueSample.objects.bulk_create(samples)
    return len(samples)


def _utilization_sample(*, now: datetime) -> int:
    per_type = (
        Device.objects.order_by()
        .values("device_type_id")
        .annotate(devices=Count("id"), schedulable=Count("id", filter=Q(node__state=NodeState.UP)))
    )
    allocated = dict(
        Allocation.objects.filter(ended_at__isnull=True, job__state__in=HOLDING_STATES)
        .order_by()
        .values("device__device_type_id")
        .annotate(held=Count("id"))
        .values_list("device__device_type_id", "held")
    )
    latest: dict[int, tuple[int, float]] = {}
    readings = (
        # In-service GPUs only, as `devices` counts them: a retired GPU's last reading is
        # not use of this cluster.
        GpuSample.objects.filter(
            at__gte=now - FRESH_READING, at__lte=now, device__retired_at__isnull=True
        )
        .order_by("at")
        .values_list("device_id", "device__device_type_id", "utilization_pct")
    )
    for device_id, type_id, utilization in readings:
        latest[device_id] = (type_id, (utilization or 0) / 100.0)
    used: dict[int, float] = defaultdict(float)
    for type_id, fraction in latest.values():
        used[type_id] += fraction
    samples = [
        UtilizationSample(
            at=now,
            device_type_id=row["device_type_id"],
            devices=row["devices"],
            schedulable=row["schedulable"],
            allocated=allocated.get(row["device_type_id"], 0),
            used=round(used.get(row["device_type_id"], 0.0), 3),
        )
        for row in per_type
    ]
    UtilizationSample.objects.bulk_create(samples)
    return len(samples)


def _utilization_buckets_rebuild(*, now: datetime, last_run: datetime | None = None) -> int:
    """Rebuild every 15-minute bucket since the one before the last run's (that one may
    have had late rows): skipped runs leave no hole in the heatmap. At most a week back,
    what the buckets are kept for."""
    since = floor_bucket(now) - BUCKET
    if last_run is not None:
        oldest = floor_bucket(now - BUCKET_RETENTION)
        since = max(min(since, floor_bucket(last_run) - BUCKET), oldest)
    sums: dict[tuple[int, datetime], list[float]] = defaultdict(lambda: [0.0, 0])
    minutes = GpuMinute.objects.filter(minute__gte=since, minute__lte=now).values_list(
        "device_id", "minute", "utilization_avg", "samples"
    )
    for device_id, minute, utilization, samples in minutes:
        cell = sums[(device_id, floor_bucket(minute))]
        if utilization is not None:
            cell[0] += utilization * samples
            cell[1] += samples
    DeviceUtilizationBucket.objects.filter(start__gte=since).delete()
    DeviceUtilizationBucket.objects.bulk_create(
        [
            DeviceUtilizationBucket(
                device_id=device_id,
                start=start,
                utilization_avg=min(100.0, total / samples) if samples else None,
                samples=int(samples),
            )
            for (device_id, start), (total, samples) in sums.items()
        ]
    )
    return len(sums)
