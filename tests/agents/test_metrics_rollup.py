"""Retention: raw samples 24 h, per-minute roll-ups 30 days; roll-ups are rerun-safe."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from agents.heartbeats import metrics_rollup
from agents.models import GpuMinute, GpuSample, JobGpuMinute, JobGpuSample, JobProgress
from tests.factories import DeviceFactory, JobFactory

NOW = timezone.now().replace(second=30, microsecond=0)


def _sample(device, at, utilization, memory=1000):  # type: ignore[no-untyped-def]
    return GpuSample.objects.create(
        device=device, at=at, utilization_pct=utilization, memory_used_mb=memory,
        memory_total_mb=80000, temperature_c=60 + utilization // 10, power_w=100.0 + utilization,
        ecc_uncorrected=0,
    )  # fmt: skip


def test_complete_minutes_are_rolled_up_per_device(db: None) -> None:
    device = DeviceFactory()
    minute = NOW.replace(second=0) - timedelta(minutes=2)
    for second, utilization, memory in ((0, 10, 1000), (10, 30, 3000), (50, 50, 2000)):
        _sample(device, minute + timedelta(seconds=second), utilization, memory)
    _sample(device, NOW.replace(second=5), 99)  # the current minute is not complete yet

    metrics_rollup(now=NOW)
    metrics_rollup(now=NOW)  # a rerun changes nothing

    rows = list(GpuMinute.objects.values_list(
        "minute", "samples", "utilization_avg", "memory_used_max_mb", "temperature_max_c",
        "power_avg_w",
    ))  # fmt: skip
    assert rows == [(minute, 3, 30.0, 3000, 65, 130.0)]


def test_per_job_use_is_rolled_up_apart_from_the_device(db: None) -> None:
    device = DeviceFactory()
    job = JobFactory()
    minute = NOW.replace(second=0) - timedelta(minutes=1)
    for second, utilization, memory in ((0, 80, 500), (20, 100, 900)):
        JobGpuSample.objects.create(
            job=job, attempt=1, device=device, at=minute + timedelta(seconds=second),
            utilization_pct=utilization, memory_used_mb=memory,
        )  # fmt: skip

    metrics_rollup(now=NOW)

    assert list(
        JobGpuMinute.objects.values_list(
            "job_id", "minute", "utilization_avg", "memory_used_max_mb"
        )
    ) == [(job.pk, minute, 90.0, 900)]


def test_raw_samples_are_kept_24_hours_and_minutes_30_days(db: None) -> None:
    device = DeviceFactory()
    kept = _sample(device, NOW - timedelta(hours=23), 1)
    _sample(device, NOW - timedelta(hours=25), 1)
    GpuMinute.objects.create(device=device, minute=NOW - timedelta(days=31), samples=1,
                             memory_used_max_mb=0)  # fmt: skip
    recent = GpuMinute.objects.create(
        device=device, minute=NOW - timedelta(days=29), samples=1, memory_used_max_mb=0
    )

    metrics_rollup(now=NOW)

    assert list(GpuSample.objects.values_list("pk", flat=True)) == [kept.pk]
    assert recent.pk in GpuMinute.objects.values_list("pk", flat=True)
    assert not GpuMinute.objects.filter(minute__lt=NOW - timedelta(days=30)).exists()


def test_progress_readings_are_kept_as_long_as_rounds_read_them(db: None) -> None:
    job = JobFactory()
    for attempt, age in ((1, timedelta(days=31)), (2, timedelta(days=29))):
        JobProgress.objects.create(
            job=job, attempt=attempt, first_progress=0.0, first_at=NOW - age,
            last_progress=1.0, last_at=NOW - age,
        )  # fmt: skip

    counts = metrics_rollup(now=NOW)

    assert counts["JobProgress deleted"] == 1
    assert list(JobProgress.objects.values_list("attempt", flat=True)) == [2]
