"""dashboard.services.aggregates_update: usage hours, samples, heatmap buckets, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.models import GpuMinute, GpuSample
from cluster.choices import NodeState
from cluster.models import Device
from dashboard.models import (
    DeviceUtilizationBucket,
    QueueSample,
    UsageHour,
    UtilizationSample,
)
from dashboard.services import aggregates_update, floor_bucket
from jobs.choices import JobState
from jobs.models import Allocation
from scheduler.core.types import DEFAULT_QUEUE_THRESHOLDS
from tests.factories import JobFactory

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def allocate(job, devices, start, end=None):
    for device in devices:
        Allocation.objects.create(job=job, attempt=1, device=device, started_at=start, ended_at=end)


@pytest.fixture
def a100s(small_cluster) -> list[Device]:
    return [d for d in small_cluster if d.device_type.name == "a100"]


@pytest.mark.django_db
def test_usage_hours_split_an_allocation_at_hour_boundaries(owner, vision, a100s):
    job = JobFactory(owner=owner, group=vision, state=JobState.SUCCEEDED, num_gpus=2)
    allocate(job, a100s[:2], T0 + timedelta(minutes=30), T0 + timedelta(hours=2, minutes=15))

    aggregates_update(now=T0 + timedelta(hours=3))

    rows = {row.hour: row for row in UsageHour.objects.filter(user=owner)}
    # 2 GPUs × 30 min, 2 × 60 min, 2 × 15 min; a100 speed 2 doubles the service.
    assert {hour: row.gpu_seconds for hour, row in rows.items()} == {
        T0: 3600.0,
        T0 + timedelta(hours=1): 7200.0,
        T0 + timedelta(hours=2): 1800.0,
    }
    assert rows[T0].service == 7200.0
    assert rows[T0].group_id == vision.pk


@pytest.mark.django_db
def test_a_live_allocation_counts_up_to_now_and_grows_on_the_next_run(owner, a100s):
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    allocate(job, a100s[:1], T0)

    aggregates_update(now=T0 + timedelta(minutes=20))
    assert UsageHour.objects.get(hour=T0).gpu_seconds == 1200.0

    aggregates_update(now=T0 + timedelta(minutes=50))
    assert UsageHour.objects.get(hour=T0).gpu_seconds == 3000.0
    assert UsageHour.objects.count() == 1


@pytest.mark.django_db
def test_reruns_are_idempotent_and_closed_hours_are_not_rebuilt(owner, a100s):
    job = JobFactory(owner=owner, state=JobState.SUCCEEDED)
    allocate(job, a100s[:1], T0, T0 + timedelta(hours=5))
    aggregates_update(now=T0 + timedelta(hours=6))
    before = {row.hour: row.gpu_seconds for row in UsageHour.objects.all()}

    result = aggregates_update(now=T0 + timedelta(hours=6, minutes=1))
    after = {row.hour: row.gpu_seconds for row in UsageHour.objects.all()}

    assert before == after and sum(after.values()) == 5 * 3600
    # Only the hours near `now` were rebuilt on the second run, not all six.
    assert result.usage_hours_rebuilt <= 2


@pytest.mark.django_db
def test_queue_samples_count_pending_jobs_and_gpus_per_level_including_empty_levels(owner):
    JobFactory(owner=owner, num_gpus=2, queue_level=0)
    JobFactory(owner=owner, num_gpus=4, queue_level=0)
    JobFactory(owner=owner, num_gpus=1, queue_level=1, state=JobState.RUNNING)

    aggregates_update(now=T0)

    samples = {s.level: (s.pending_jobs, s.pending_gpus) for s in QueueSample.objects.all()}
    # Default config: every empty level gets its zero sample.
    levels = len(DEFAULT_QUEUE_THRESHOLDS) + 1
    assert samples == {0: (2, 6)} | {level: (0, 0) for level in range(1, levels)}


@pytest.mark.django_db
def test_utilization_samples_count_allocated_and_used_gpus_per_type(owner, small_cluster):
    a100s = [d for d in small_cluster if d.device_type.name == "a100"]
    job = JobFactory(owner=owner, state=JobState.RUNNING, num_gpus=2)
    allocate(job, a100s[:2], T0 - timedelta(minutes=5))
    GpuSample.objects.create(
        device=a100s[0],
        at=T0 - timedelta(seconds=30),
        utilization_pct=80,
        memory_used_mb=1,
        memory_total_mb=2,
    )
    GpuSample.objects.create(
        device=a100s[1],
        at=T0 - timedelta(seconds=20),
        utilization_pct=40,
        memory_used_mb=1,
        memory_total_mb=2,
    )
    # A stale reading (older than 2 minutes) does not count as use.
    GpuSample.objects.create(
        device=a100s[2],
        at=T0 - timedelta(minutes=10),
        utilization_pct=100,
        memory_used_mb=1,
        memory_total_mb=2,
    )
    a100s[4].node.state = NodeState.DRAINED
    a100s[4].node.save()

    aggregates_update(now=T0)

    sample = UtilizationSample.objects.get(device_type__name="a100")
    assert (sample.devices, sample.schedulable, sample.allocated) == (8, 4, 2)
    assert sample.used == pytest.approx(1.2)
    v100 = UtilizationSample.objects.get(device_type__name="v100")
    assert (v100.devices, v100.allocated, v100.used) == (2, 0, 0.0)


@pytest.mark.django_db
def test_heatmap_buckets_average_minute_rollups_weighted_by_samples(small_cluster):
    device = small_cluster[0]
    now = T0 + timedelta(minutes=20)
    GpuMinute.objects.create(
        device=device,
        minute=T0 + timedelta(minutes=1),
        samples=6,
        utilization_avg=90,
        memory_used_max_mb=1,
    )
    GpuMinute.objects.create(
        device=device,
        minute=T0 + timedelta(minutes=2),
        samples=2,
        utilization_avg=10,
        memory_used_max_mb=1,
    )
    GpuMinute.objects.create(
        device=device,
        minute=T0 + timedelta(minutes=16),
        samples=6,
        utilization_avg=50,
        memory_used_max_mb=1,
    )

    aggregates_update(now=now)

    buckets = {
        b.start: b.utilization_avg for b in DeviceUtilizationBucket.objects.filter(device=device)
    }
    assert buckets == {T0: pytest.approx(70.0), floor_bucket(now): pytest.approx(50.0)}


@pytest.mark.django_db
def test_old_samples_and_buckets_are_deleted(small_cluster):
    device = small_cluster[0]
    old = T0 - timedelta(days=40)
    QueueSample.objects.create(at=old, level=0, pending_jobs=1, pending_gpus=1)
    DeviceUtilizationBucket.objects.create(device=device, start=T0 - timedelta(days=8), samples=1)

    aggregates_update(now=T0)

    assert not QueueSample.objects.filter(at=old).exists()
    assert not DeviceUtilizationBucket.objects.filter(start__lt=T0 - timedelta(days=7)).exists()


@pytest.mark.django_db
def test_the_celery_task_runs_the_service(owner, a100s):
    from dashboard.tasks import aggregates_update_task

    job = JobFactory(owner=owner, state=JobState.RUNNING)
    allocate(job, a100s[:1], T0)
    result = aggregates_update_task.apply().get()
    assert result["usage_rows"] >= 1
    assert UsageHour.objects.filter(user=owner).exists()
