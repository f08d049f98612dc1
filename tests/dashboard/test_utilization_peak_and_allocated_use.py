"""The utilization summary against hand counts: "Allocated (peak)" is the most GPUs held at
one moment in every window (not the peak of bucket means), and "Used of allocated" counts
only the use of GPUs that jobs hold, never a free GPU's or a stopping job's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.models import GpuSample
from dashboard.models import UtilizationSample
from dashboard.selectors.utilization import WINDOWS, allocation_series
from dashboard.services import aggregates_update
from jobs.choices import JobState
from tests.dashboard.helpers import device, hold, logged_in

NOW = datetime(2026, 11, 20, 10, 20, tzinfo=UTC)


def a100_series(window: str):
    (series,) = [
        one
        for one in allocation_series(window=WINDOWS[window], now=NOW)
        if one.device_type == "a100"
    ]
    return series


def sample(device_type, *, at: datetime, allocated: int, used: float, used_allocated=None):
    return UtilizationSample(
        at=at,
        device_type=device_type,
        devices=8,
        schedulable=8,
        allocated=allocated,
        used=used,
        used_allocated=used_allocated,
    )


def reading(gpu, pct: float) -> None:
    GpuSample.objects.create(
        device=gpu,
        at=NOW - timedelta(seconds=20),
        utilization_pct=pct,
        memory_used_mb=1,
        memory_total_mb=40960,
    )


# --------------------------------------------------------------------------- allocated (peak)


@pytest.mark.django_db
@pytest.mark.parametrize("window", ["24h", "7d", "30d"])
def test_the_allocated_peak_is_the_most_gpus_held_at_one_sample(small_cluster, window):
    # A sample a minute for 24 h: all 8 a100 held for 10 minutes, none otherwise. The 30 d
    # window's 2-hour buckets average that to 0.67 GPUs; the peak is still 8.
    a100 = small_cluster[0].device_type
    UtilizationSample.objects.bulk_create(
        sample(
            a100,
            at=NOW - timedelta(minutes=minute),
            allocated=8 if 60 <= minute < 70 else 0,
            used=0.0,
            used_allocated=0.0,
        )
        for minute in range(24 * 60)
    )

    series = a100_series(window)

    assert series.allocated_peak == 8
    if window != "24h":  # its 5-minute buckets keep the peak in their means too
        assert max(point.allocated for point in series.points) < 8


@pytest.mark.django_db
def test_the_page_and_the_api_show_the_peak_of_the_samples(small_cluster, lab_admin, api_as):
    a100 = small_cluster[0].device_type
    first = datetime.now(UTC) - timedelta(hours=1)
    UtilizationSample.objects.bulk_create(
        sample(
            a100,
            at=first + timedelta(minutes=minute),
            allocated=6 if minute == 7 else 1,
            used=0.0,
            used_allocated=0.0,
        )
        for minute in range(30)
    )
    aggregates_update()

    page = logged_in(lab_admin).get("/utilization/?window=30d")
    body = api_as(lab_admin).get("/api/v1/utilization/?window=30d").json()

    (summary,) = [one for one in page.context["series"] if one.device_type == "a100"]
    assert summary.allocated_peak == 6
    assert '<td class="num">6</td>' in page.content.decode()
    points = {one["device_type"]: one["points"] for one in body["series"]}["a100"]
    assert max(point["allocated_peak"] for point in points) == 6
    assert max(point["allocated"] for point in points) < 6


# --------------------------------------------------------------------------- used of allocated


@pytest.mark.django_db
def test_used_of_allocated_counts_only_the_gpus_jobs_hold(owner, small_cluster):
    held, stopping, free = (device(small_cluster, "a0", i) for i in range(3))
    hold(owner, [held], start=NOW - timedelta(hours=1))
    # A cancelled job whose process is still stopping: ended, not released.
    hold(owner, [stopping], start=NOW - timedelta(hours=1), end=NOW - timedelta(minutes=3),
         state=JobState.CANCELLED)  # fmt: skip
    reading(held, 0)
    reading(stopping, 100)
    reading(free, 100)

    aggregates_update(now=NOW)

    row = UtilizationSample.objects.get(device_type__name="a100")
    assert (row.allocated, row.used, row.used_allocated) == (1, 2.0, 0.0)
    series = a100_series("24h")
    assert series.used_mean == 2.0  # busy GPUs overall, as before
    assert series.used_of_allocated_pct == 0.0


@pytest.mark.django_db
def test_used_of_allocated_is_the_held_gpus_share_busy(owner, small_cluster):
    gpus = [device(small_cluster, "a0", i) for i in range(3)]
    hold(owner, gpus[:2], start=NOW - timedelta(hours=1))
    reading(gpus[0], 50)
    reading(gpus[1], 100)
    reading(gpus[2], 100)  # free

    aggregates_update(now=NOW)

    series = a100_series("24h")
    assert series.used_of_allocated_pct == 75.0
    assert series.used_mean == 2.5


@pytest.mark.django_db
def test_buckets_sampled_before_the_allocated_use_was_recorded_have_no_ratio(small_cluster):
    a100 = small_cluster[0].device_type
    # 5-minute buckets of the 24 h window: one of old rows only, one mixed, one measured.
    base = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    UtilizationSample.objects.bulk_create(
        [
            sample(a100, at=base, allocated=4, used=4.0),
            sample(a100, at=base + timedelta(minutes=5), allocated=4, used=4.0),
            sample(a100, at=base + timedelta(minutes=6), allocated=4, used=4.0, used_allocated=1.0),
            sample(
                a100, at=base + timedelta(minutes=10), allocated=2, used=2.0, used_allocated=0.5
            ),
        ]
    )

    series = a100_series("24h")

    assert [point.used_allocated for point in series.points] == [None, None, 0.5]
    # Over the measured bucket only: 0.5 of 2 held GPUs busy.
    assert series.used_of_allocated_pct == 25.0


@pytest.mark.django_db
def test_without_any_measured_bucket_the_ratio_is_not_shown(small_cluster, lab_admin, api_as):
    a100 = small_cluster[0].device_type
    UtilizationSample.objects.create(
        at=datetime.now(UTC) - timedelta(minutes=2),
        device_type=a100,
        devices=8,
        schedulable=8,
        allocated=4,
        used=4.0,
    )
    aggregates_update()

    page = logged_in(lab_admin).get("/utilization/")
    body = api_as(lab_admin).get("/api/v1/utilization/").json()

    (summary,) = [one for one in page.context["series"] if one.device_type == "a100"]
    assert summary.allocated_mean > 0 and summary.used_of_allocated_pct is None
    points = {one["device_type"]: one["points"] for one in body["series"]}["a100"]
    assert points[0]["used_allocated"] is None
