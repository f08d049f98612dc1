"""Usage rows follow the lab's local hours, so every local day is a whole number of rows.

In Asia/Kolkata (UTC+5:30) and America/St_Johns (UTC-3:30) local midnight falls at half
past a UTC hour: rows on UTC hours put half an hour per GPU on the wrong day.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from dashboard.models import AggregatesState, UsageHour
from dashboard.selectors.usage import usage_report
from dashboard.selectors.utilization import WINDOWS, usage_breakdown
from dashboard.services import aggregates_update, floor_hour, hour_starts, next_hour
from jobs.choices import JobState
from jobs.models import Allocation
from tests.factories import JobFactory

HALF_HOUR_ZONES = ["Asia/Kolkata", "America/St_Johns"]


def local(zone: str, *args: int) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(zone)).astimezone(UTC)


def held(owner, group, gpu, start: datetime, end: datetime) -> None:
    job = JobFactory(owner=owner, group=group, state=JobState.SUCCEEDED, num_gpus=1)
    Allocation.objects.create(job=job, attempt=1, device=gpu, started_at=start, ended_at=end)


def day_hours(report_day: date) -> float:
    return usage_report(start=report_day, end=report_day).total.gpu_hours


@pytest.mark.django_db
@pytest.mark.parametrize("zone", HALF_HOUR_ZONES)
def test_an_hour_across_local_midnight_is_split_at_midnight(
    settings, zone, owner, vision, lab_admin, small_cluster, api_as
):
    settings.TIME_ZONE = zone
    # One GPU from 23:30 to 00:30 local: half an hour on each day.
    held(
        owner,
        vision,
        small_cluster[0],
        local(zone, 2026, 11, 19, 23, 30),
        local(zone, 2026, 11, 20, 0, 30),
    )
    now = local(zone, 2026, 11, 20, 12, 0)

    aggregates_update(now=now)

    rows = UsageHour.objects.order_by("hour")
    assert [timezone.localtime(row.hour).strftime("%H:%M") for row in rows] == ["23:00", "00:00"]
    assert [row.gpu_seconds for row in rows] == [1800.0, 1800.0]
    assert day_hours(date(2026, 11, 19)) == 0.5
    assert day_hours(date(2026, 11, 20)) == 0.5
    breakdown = usage_breakdown(viewer=lab_admin, window=WINDOWS["7d"], now=now)
    per_day = {
        timezone.localdate(period): hours
        for period, hours in zip(breakdown.periods, breakdown.by_user[0].gpu_hours, strict=True)
        if hours
    }
    assert per_day == {date(2026, 11, 19): 0.5, date(2026, 11, 20): 0.5}
    body = api_as(lab_admin).get("/api/v1/usage/?start=2026-11-20&end=2026-11-20").json()
    assert body["gpu_hours"] == 0.5


@pytest.mark.django_db
@pytest.mark.parametrize("zone", HALF_HOUR_ZONES)
def test_the_hourly_breakdown_has_one_period_per_local_hour(
    settings, zone, owner, vision, lab_admin, small_cluster
):
    settings.TIME_ZONE = zone
    held(
        owner,
        vision,
        small_cluster[0],
        local(zone, 2026, 11, 20, 9, 0),
        local(zone, 2026, 11, 20, 10, 0),
    )
    now = local(zone, 2026, 11, 20, 12, 10)
    aggregates_update(now=now)

    breakdown = usage_breakdown(viewer=lab_admin, window=WINDOWS["24h"], now=now)

    assert len(breakdown.periods) == 24
    assert {timezone.localtime(period).minute for period in breakdown.periods} == {0}
    assert breakdown.periods[-1] == local(zone, 2026, 11, 20, 12, 0)
    nine = breakdown.periods.index(local(zone, 2026, 11, 20, 9, 0))
    assert breakdown.by_user[0].gpu_hours[nine] == 1.0 and breakdown.by_user[0].total == 1.0


@pytest.mark.django_db
def test_a_time_zone_change_rebuilds_every_usage_row(settings, owner, vision, small_cluster):
    # Built on UTC hours first (as every row was before rows followed local hours).
    held(
        owner,
        vision,
        small_cluster[0],
        datetime(2026, 11, 19, 18, 0, tzinfo=UTC),
        datetime(2026, 11, 19, 19, 0, tzinfo=UTC),
    )
    aggregates_update(now=datetime(2026, 11, 20, 6, 0, tzinfo=UTC))
    assert list(UsageHour.objects.values_list("hour", flat=True)) == [
        datetime(2026, 11, 19, 18, 0, tzinfo=UTC)
    ]

    settings.TIME_ZONE = "Asia/Kolkata"  # local midnight: 18:30 UTC
    result = aggregates_update(now=datetime(2026, 11, 20, 6, 1, tzinfo=UTC))

    assert sorted(UsageHour.objects.values_list("hour", "gpu_seconds")) == [
        (datetime(2026, 11, 19, 17, 30, tzinfo=UTC), 1800.0),
        (datetime(2026, 11, 19, 18, 30, tzinfo=UTC), 1800.0),
    ]
    assert result.usage_hours_rebuilt > 2  # all of them, not just the last ones
    assert AggregatesState.objects.get(pk=1).usage_time_zone == "Asia/Kolkata"
    assert (day_hours(date(2026, 11, 19)), day_hours(date(2026, 11, 20))) == (0.5, 0.5)


@pytest.mark.django_db
def test_rows_built_before_the_zone_was_recorded_are_rebuilt_once(
    settings, owner, vision, small_cluster
):
    settings.TIME_ZONE = "America/St_Johns"
    held(
        owner,
        vision,
        small_cluster[0],
        datetime(2026, 11, 19, 3, 0, tzinfo=UTC),
        datetime(2026, 11, 19, 4, 0, tzinfo=UTC),
    )
    # What the migration leaves: UTC-hour rows, and a state with no zone yet.
    stale = datetime(2026, 11, 19, 3, 0, tzinfo=UTC)
    UsageHour.objects.create(
        hour=stale, user=owner, group=vision, device_type=small_cluster[0].device_type,
        gpu_seconds=3600.0, service=7200.0,
    )  # fmt: skip
    AggregatesState.objects.create(
        pk=1, usage_rebuilt_from=datetime(2026, 11, 19, 5, 0, tzinfo=UTC), usage_time_zone=""
    )

    aggregates_update(now=datetime(2026, 11, 19, 6, 0, tzinfo=UTC))

    # 03:00-04:00 UTC is 23:30-00:30 in St John's (UTC-3:30).
    assert sorted(UsageHour.objects.values_list("hour", "gpu_seconds")) == [
        (datetime(2026, 11, 19, 2, 30, tzinfo=UTC), 1800.0),
        (datetime(2026, 11, 19, 3, 30, tzinfo=UTC), 1800.0),
    ]
    assert (day_hours(date(2026, 11, 18)), day_hours(date(2026, 11, 19))) == (0.5, 0.5)
    result = aggregates_update(now=datetime(2026, 11, 19, 6, 1, tzinfo=UTC))
    assert result.usage_hours_rebuilt <= 2  # once only: then incremental again


@pytest.mark.parametrize(
    ("zone", "day", "hours"),
    [
        ("America/St_Johns", date(2026, 3, 8), 23),  # 02:00 -3:30 -> 03:00 -2:30
        ("America/St_Johns", date(2026, 11, 1), 25),
        ("Australia/Lord_Howe", date(2026, 10, 4), 23.5),  # 02:00 -> 02:30, +10:30 -> +11
        ("Australia/Lord_Howe", date(2026, 4, 5), 24.5),  # 02:00 -> 01:30
        ("America/New_York", date(2026, 3, 8), 23),
        ("Asia/Kolkata", date(2026, 3, 8), 24),
    ],
)
def test_local_hours_tile_a_day_also_across_a_daylight_saving_change(settings, zone, day, hours):
    settings.TIME_ZONE = zone
    midnight = timezone.make_aware(datetime.combine(day, datetime.min.time()))
    next_midnight = timezone.make_aware(
        datetime.combine(day + timedelta(days=1), datetime.min.time())
    )

    starts = hour_starts(midnight, next_midnight - timedelta(microseconds=1))

    assert starts[0] == midnight and next_hour(starts[-1]) == next_midnight
    lengths = [b - a for a, b in zip(starts, [*starts[1:], next_midnight], strict=True)]
    assert all(timedelta(0) < length <= timedelta(hours=1) for length in lengths)
    assert sum(lengths, timedelta(0)) == timedelta(hours=hours)
    for start in starts:
        assert floor_hour(start) == start
        assert floor_hour(start + timedelta(minutes=29, seconds=59)) == start
        assert next_hour(start) > start
