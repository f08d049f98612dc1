"""A time zone change never re-rates past usage at today's device speeds.

Migration 0003 leaves every deployment's usage rows with no recorded zone (''), so the first
run after it meets a "zone change". A row's normalized hours were rated at the speed its
device type had back then; an admin may have re-rated the type since.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.models import DeviceType
from dashboard.models import AggregatesState, UsageHour
from dashboard.services import aggregates_update
from jobs.choices import JobState
from jobs.models import Allocation
from tests.factories import JobFactory

OCTOBER_1 = datetime(2026, 10, 1, 10, 0, tzinfo=UTC)
# Europe/Berlin leaves summer time at 01:00 UTC: a run across it.
BERLIN_DST_END = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
BUILT_AT = datetime(2026, 11, 1, tzinfo=UTC)


def held(owner, group, gpu, start: datetime, end: datetime) -> None:
    job = JobFactory(owner=owner, group=group, state=JobState.SUCCEEDED, num_gpus=1)
    Allocation.objects.create(job=job, attempt=1, device=gpu, started_at=start, ended_at=end)


def rows() -> list[tuple[datetime, float, float]]:
    return sorted(UsageHour.objects.values_list("hour", "gpu_seconds", "service"))


def built_on_utc_hours_then_re_rated(settings, owner, vision, small_cluster) -> None:
    """October's a100 hours built on UTC hours at speed 2; a100 re-rated to 3 in November;
    the state as migration 0003 leaves it."""
    settings.TIME_ZONE = "UTC"
    a100 = small_cluster[0]
    assert a100.device_type.name == "a100" and a100.device_type.speed == 2.0
    held(owner, vision, a100, OCTOBER_1, OCTOBER_1 + timedelta(hours=1))
    held(owner, vision, a100, BERLIN_DST_END, BERLIN_DST_END + timedelta(hours=1))
    aggregates_update(now=BUILT_AT)
    assert sum(service for _, _, service in rows()) == 2 * 3600 * 2.0
    DeviceType.objects.filter(name="a100").update(speed=3.0)
    AggregatesState.objects.filter(pk=1).update(usage_time_zone="")


@pytest.mark.django_db
@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin"])
def test_a_re_rated_type_keeps_its_old_normalized_hours_in_a_whole_hour_zone(
    settings, zone, owner, vision, small_cluster
):
    built_on_utc_hours_then_re_rated(settings, owner, vision, small_cluster)
    before = rows()
    settings.TIME_ZONE = zone

    result = aggregates_update(now=BUILT_AT + timedelta(days=1))

    # The rows already lie on this zone's hours: kept as they were, zone recorded, and only
    # the hours since the last run's unsettled one rebuilt.
    assert rows() == before
    assert AggregatesState.objects.get(pk=1).usage_time_zone == zone
    assert result.usage_hours_rebuilt == 24 + 1 + 1  # 23:00 UTC of Oct 31 to 00:00 of Nov 2


@pytest.mark.django_db
def test_a_rebuild_for_a_half_hour_zone_re_slices_history_without_re_rating_it(
    settings, owner, vision, small_cluster
):
    built_on_utc_hours_then_re_rated(settings, owner, vision, small_cluster)
    # Used after the re-rating: at today's speed.
    november = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)
    held(owner, vision, small_cluster[0], november, november + timedelta(minutes=30))
    settings.TIME_ZONE = "Asia/Kolkata"  # UTC+5:30: every hour is cut in two

    aggregates_update(now=BUILT_AT + timedelta(days=1))

    half = 1800.0
    assert rows() == [
        (OCTOBER_1 - timedelta(minutes=30), half, half * 2.0),
        (OCTOBER_1 + timedelta(minutes=30), half, half * 2.0),
        (BERLIN_DST_END, half * 2, half * 2 * 2.0),
        (november - timedelta(minutes=30), half, half * 3.0),
    ]
    assert AggregatesState.objects.get(pk=1).usage_time_zone == "Asia/Kolkata"
