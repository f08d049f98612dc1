"""Demo nodes report through the real agent's collector over a simulated NVML."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from agents.models import GpuSample, JobGpuSample
from agents.simulated import simulated_heartbeats, simulated_report
from cluster.models import Node
from jobs.models import Allocation
from jobs.services import job_mark_running
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory


def test_each_simulated_node_reports_every_ten_seconds_with_its_jobs_use(db: None) -> None:
    node = NodeFactory(simulated=True)
    for index in range(2):
        DeviceFactory(node=node, index=index, memory_mb=32768)
    NodeFactory(name="real")  # real nodes have agents of their own
    job = started_job(node, command=["sleep", "60"])
    job_mark_running(job_id=job.pk)
    now = timezone.now()

    assert simulated_heartbeats(now=now) == 1
    assert simulated_heartbeats(now=now + timedelta(seconds=5)) == 0
    assert simulated_heartbeats(now=now + timedelta(seconds=10)) == 1

    assert Node.objects.get(pk=node.pk).last_heartbeat_at == now + timedelta(seconds=10)
    assert GpuSample.objects.count() == 4
    busy = JobGpuSample.objects.filter(job=job)
    assert busy.count() == 2
    assert all(70 <= sample.utilization_pct <= 99 for sample in busy)


def test_a_simulated_job_reports_progress_at_its_devices_speed(db: None) -> None:
    node = NodeFactory(simulated=True)
    fast = DeviceTypeFactory(name="a100", speed=2.0)
    DeviceFactory(node=node, index=0, device_type=fast)
    DeviceFactory(node=node, index=1, device_type=fast)
    job = started_job(node, command=["sleep", "600"])
    job_mark_running(job_id=job.pk)
    job.refresh_from_db()
    held_since = Allocation.objects.get(job=job, ended_at__isnull=True).started_at

    report = simulated_report(node=node, now=held_since + timedelta(seconds=30))

    # 100 steps a second at speed 1.0, for the 30 s this attempt has held the device.
    device = Allocation.objects.get(job=job, ended_at__isnull=True).device
    assert report["jobs"] == [
        {"job_id": job.pk, "attempt": job.attempt, "gpu_uuid": device.uuid, "progress": 6000.0}
    ]
