"""`snapshot_build` against the real database: one consistent view, complete usage."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

import scheduler.snapshot as snapshot_module
from cluster.models import Device
from jobs.models import Job
from jobs.services import (
    JobSpec,
    job_cancel,
    job_mark_running,
    job_preempt,
    job_start,
    job_submit,
)
from scheduler.core.types import Snapshot
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.snapshot import snapshot_build
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory
from tests.scheduler.livefixtures import age_job, configure


def running_job(owner, *, gpus: int, seconds: float) -> tuple[Job, list[Device]]:
    """A job running for `seconds` on a real (never polled) node of `gpus` v100s."""
    configure(placement="best-fit", queue_thresholds=[3600.0])
    v100 = DeviceTypeFactory(name="v100", speed=1.0)
    node = NodeFactory(name="n0", simulated=False)
    devices = [DeviceFactory(node=node, index=i, device_type=v100) for i in range(gpus)]
    job = job_submit(
        owner=owner,
        spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "600"], num_gpus=gpus),
    )
    job_start(job_id=job.pk, device_ids=[d.pk for d in devices])
    job_mark_running(job_id=job.pk)
    age_job(job.pk, seconds=seconds)
    return job, devices


def build() -> Snapshot:
    settings = scheduler_settings_from(scheduler_config_get())
    snapshot, _ = snapshot_build(now=timezone.now(), settings=settings)
    return snapshot


@pytest.mark.django_db(transaction=True)
def test_a_cancel_committed_while_the_snapshot_is_read_does_not_free_its_gpus(owner, monkeypatch):
    """Cancelled between the read of stopping devices and that of live allocations, a job
    used to be in neither: its GPUs looked free while its process still ran on them."""
    job, devices = running_job(owner, gpus=2, seconds=3600)
    real_devices_stopping = snapshot_module.devices_stopping

    def cancel_right_after(**kwargs):
        stopping = real_devices_stopping(**kwargs)

        def cancel() -> None:
            try:
                job_cancel(job_id=job.pk, by=owner)
            finally:
                connection.close()

        thread = threading.Thread(target=cancel)
        thread.start()
        thread.join()
        return stopping

    monkeypatch.setattr(snapshot_module, "devices_stopping", cancel_right_after)
    snapshot = build()

    taken = {d for view in snapshot.jobs for d in view.devices} | snapshot.busy_device_ids
    assert {d.pk for d in devices} <= taken
    assert Job.objects.get(pk=job.pk).state == "CANCELLED"  # it did commit meanwhile


@pytest.mark.django_db
def test_a_preempting_job_keeps_counting_in_its_owners_usage(owner):
    """Its service is charged when it leaves its GPUs; until then the snapshot adds it."""
    job, _ = running_job(owner, gpus=4, seconds=3600)
    running_usage = build().user_by_name[owner.username].usage

    job_preempt(job_id=job.pk, reason="a job of a higher queue")
    preempting_usage = build().user_by_name[owner.username].usage

    assert running_usage == pytest.approx(4 * 3600, rel=0.01)
    assert preempting_usage == pytest.approx(running_usage, rel=0.01)
    assert job.pk not in {view.id for view in build().jobs}  # still not the policy's to move
