"""The periodic aggregation behind every dashboard figure (style.md rule 24).

`aggregates_update` is idempotent and incremental: run it every minute (Celery beat does),
run it twice, or skip a few runs; each run rebuilds exactly the rows that may have changed.
"""

from __future__ import annotations

import math
import time
import uuid
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
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


def _offset(moment: datetime, zone: tzinfo) -> timedelta:
    return moment.astimezone(zone).utcoffset() or timedelta(0)


def _offset_change(after: datetime, until: datetime, zone: tzinfo) -> datetime:
    """The instant in (after, until] where the zone's UTC offset changes (there is one).

    Zone transitions fall on whole seconds, so a binary search over seconds finds it
    exactly (about a dozen steps for an hour).
    """
    offset = _offset(after, zone)
    low, high = math.floor(after.timestamp()), math.ceil(until.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if _offset(datetime.fromtimestamp(middle, UTC), zone) == offset:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def floor_hour(moment: datetime, *, zone: tzinfo | None = None) -> datetime:
    """Start (in UTC) of the hour of the lab's time zone (settings.TIME_ZONE) holding `moment`.

    Usage rows follow local hours, not UTC ones: in Asia/Kolkata (UTC+5:30) or
    America/St_Johns (UTC-3:30) local midnight falls at half past a UTC hour, so UTC-hour rows
    would straddle it and put up to half an hour per GPU on the wrong day. A local hour
    starts where the wall clock reads HH:00, or where the offset changes mid-hour (the half
    hour around Australia/Lord_Howe's 30-minute DST change), so every local midnight is the
    start of one. `zone` (default: the lab's) is for comparing with another zone's hours.
    """
    zone = zone or timezone.get_default_timezone()
    moment = moment.astimezone(UTC)
    offset = _offset(moment, zone)
    start = (moment + offset).replace(minute=0, second=0, microsecond=0) - offset
    if _offset(start, zone) != offset:
        # The offset changed between that wall-clock hour and `moment`: the hour began there.
        start = _offset_change(start, moment, zone)
    return start


def next_hour(start: datetime, *, zone: tzinfo | None = None) -> datetime:
    """The start of the local hour after the one starting at `start` (see `floor_hour`)."""
    zone = zone or timezone.get_default_timezone()
    following = floor_hour(start + HOUR, zone=zone)
    if following <= start:  # pragma: no cover - no zone has two changes within an hour
        return start + HOUR
    before = following - timedelta(microseconds=1)
    if _offset(before, zone) != _offset(start, zone):
        following = _offset_change(start, before, zone)
    return following


def hour_starts(first: datetime, last: datetime, *, zone: tzinfo | None = None) -> list[datetime]:
    """Every local hour start from the one holding `first` to the one holding `last`."""
    starts = [floor_hour(first, zone=zone)]
    while True:
        following = next_hour(starts[-1], zone=zone)
        if following > last:
            return starts
        starts.append(following)


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
        state.usage_time_zone = settings.TIME_ZONE
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


def _rows_zone(name: str) -> tzinfo | None:
    """The zone whose hours rows recorded under `name` follow; None if this tz database
    lacks it. Rows from before the zone was recorded ('', migration 0003) lie on UTC hours."""
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _usage_hours_rebuild(*, state: AggregatesState, now: datetime) -> tuple[int, int]:
    """Rebuild UsageHour rows for the hours [from, now]. Returns (hours, rows written).

    Hours before `from` are final: every allocation overlapping them had started by the time
    they were last rebuilt, after they had closed, so its share of them cannot change.
    Rows follow the local hours of settings.TIME_ZONE (`floor_hour`). When the zone differs
    from the one the rows were built in (a new setting, or rows from before rows followed
    local hours):
    - if both zones have the same hour starts over the rows' range (UTC and any zone a whole
      number of hours off it throughout, DST changes included), the rows already lie on the
      new hours: only the zone is recorded, and the run is incremental as usual;
    - otherwise every row is rebuilt from the allocations, which are never deleted. A final
      row's normalized hours were rated at the device speed of its day, and an admin may
      have re-rated the type since: each piece of an allocation keeps the service per
      GPU-second of the old final row it lay in, so history is re-sliced, never re-rated.
    """
    zone_changed = (
        state.usage_rebuilt_from is not None and state.usage_time_zone != settings.TIME_ZONE
    )
    old_zone = _rows_zone(state.usage_time_zone) if zone_changed else None
    if zone_changed and old_zone is not None:
        first_row = UsageHour.objects.aggregate(first=Min("hour"))["first"]
        if first_row is not None:
            first_row = min(first_row, state.usage_rebuilt_from)
            last_row = state.usage_rebuilt_from
            if hour_starts(first_row, last_row, zone=old_zone) == hour_starts(first_row, last_row):
                zone_changed = False
    rebuild_from = None if zone_changed else state.usage_rebuilt_from
    if rebuild_from is None:
        first = Allocation.objects.aggregate(first=Min("started_at"))["first"]
        if first is None:
            if zone_changed:
                UsageHour.objects.all().delete()
            return 0, 0
        rebuild_from = floor_hour(first)
    # On an hour start whatever the rows were built with (an older tz database may have
    # put an hour edge elsewhere), so the rows deleted below are exactly those rebuilt.
    rebuild_from = floor_hour(min(rebuild_from, now))
    # Hour starts up to the one holding `now`, and the next one as the last one's end.
    starts = hour_starts(rebuild_from, now)
    starts.append(next_hour(starts[-1]))
    # After a zone change: the old final rows' service per GPU-second, by (old hour, user,
    # group, type), and the old hour starts, so each allocation is cut at both zones' hours.
    carried: dict[tuple[datetime, int, int | None, int], float] = {}
    old_starts: list[datetime] = []
    if zone_changed and old_zone is not None:
        final_rows = UsageHour.objects.filter(
            hour__lt=state.usage_rebuilt_from, gpu_seconds__gt=0
        ).values_list("hour", "user_id", "group_id", "device_type_id", "gpu_seconds", "service")
        for hour, user_id, group_id, type_id, gpu_seconds, service in final_rows.iterator(
            chunk_size=5000
        ):
            carried[(hour, user_id, group_id, type_id)] = service / gpu_seconds
        old_starts = hour_starts(rebuild_from, state.usage_rebuilt_from, zone=old_zone)
    cuts = sorted(set(starts) | set(old_starts)) if old_starts else starts
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
        i = bisect_right(cuts, begin) - 1
        while cuts[i] < end:
            piece, piece_end = cuts[i], cuts[i + 1]
            seconds = (min(end, piece_end) - max(begin, piece)).total_seconds()
            if seconds > 0:
                hour = starts[bisect_right(starts, piece) - 1] if old_starts else piece
                rate = speed
                if carried:
                    old_hour = old_starts[bisect_right(old_starts, piece) - 1]
                    rate = carried.get((old_hour, user_id, group_id, type_id), speed)
                cell = totals[(hour, user_id, group_id, type_id)]
                cell[0] += seconds
                cell[1] += seconds * rate
            i += 1
    # After a zone change the old rows start on other instants: drop them all.
    stale = (
        UsageHour.objects.all()
        if zone_changed
        else UsageHour.objects.filter(hour__gte=rebuild_from)
    )
    stale.delete()
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
    return len(starts) - 1, len(totals)


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
        .annotate(
            devices=Count("id"),
            # Where new jobs may start: on an UP node, and not cordoned.
            schedulable=Count("id", filter=Q(node__state=NodeState.UP, cordoned_at__isnull=True)),
        )
    )
    # The devices jobs hold now (device -> type); one live allocation per device at most
    # (`allocation_one_live_per_device`). An ended allocation whose device is not released
    # yet, a cancelled job's process still stopping, is not held: no job uses that GPU.
    held = dict(
        Allocation.objects.filter(ended_at__isnull=True, job__state__in=HOLDING_STATES)
        .order_by()
        .values_list("device_id", "device__device_type_id")
    )
    allocated = Counter(held.values())
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
    used_allocated: dict[int, float] = defaultdict(float)
    for device_id, (type_id, fraction) in latest.items():
        used[type_id] += fraction
        if device_id in held:
            used_allocated[type_id] += fraction
    samples = [
        UtilizationSample(
            at=now,
            device_type_id=row["device_type_id"],
            devices=row["devices"],
            schedulable=row["schedulable"],
            allocated=allocated.get(row["device_type_id"], 0),
            used=round(used.get(row["device_type_id"], 0.0), 3),
            used_allocated=round(used_allocated.get(row["device_type_id"], 0.0), 3),
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
