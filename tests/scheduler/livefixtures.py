"""Fixtures for the live-loop tests (database-backed): a simulated cluster and helpers."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from cluster.models import Device
from jobs.choices import HOLDING_STATES, JobState
from jobs.models import Allocation, Job
from scheduler.models import SchedulerConfig
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory


def simulated_cluster(*, nodes: int = 1, gpus_per_node: int = 4) -> list[Device]:
    v100 = DeviceTypeFactory(name="v100", speed=1.0)
    devices = []
    for number in range(nodes):
        node = NodeFactory(name=f"sim{number}", simulated=True)
        devices += [
            DeviceFactory(node=node, index=i, device_type=v100) for i in range(gpus_per_node)
        ]
    return devices


def configure(**values: object) -> SchedulerConfig:
    config, _ = SchedulerConfig.objects.get_or_create(pk=1)
    for name, value in values.items():
        setattr(config, name, value)
    config.full_clean()
    config.save()
    return config


def configure_tiresias_rules() -> SchedulerConfig:
    """Tiresias' own preemption rules (one threshold, no patience, any lower queue), so a
    2-hour job is preempted for a new one at once: for tests of the round's plumbing,
    which churn control would otherwise hold back."""
    return configure(
        placement="best-fit",
        queue_thresholds=[3600.0],
        min_runtime_seconds=300.0,
        preempt_patience_seconds=0.0,
        preempt_margin=1,
    )


def age_job(job_id: int, *, seconds: float) -> None:
    """Pretend the job's current state began `seconds` ago (its run, or its wait)."""
    earlier = timezone.now() - timedelta(seconds=seconds)
    Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).update(started_at=earlier)
    Job.objects.filter(pk=job_id).update(started_at=earlier)
    Job.objects.filter(pk=job_id, state=JobState.PENDING).update(pending_since=earlier)


def assert_consistent() -> None:
    """The invariants the live loop must never break, checked against the rows.

    Both reads come from one REPEATABLE READ snapshot: with other threads committing in
    between, two READ COMMITTED queries could pair old allocations with new job states.
    """
    outermost = not connection.in_atomic_block  # inside a test's transaction: already one view
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        _check_rows()


def _check_rows() -> None:
    live = list(
        Allocation.objects.filter(ended_at__isnull=True).values_list(
            "job_id", "attempt", "device_id"
        )
    )
    devices = [device for _, _, device in live]
    assert len(devices) == len(set(devices)), "a device is held twice"
    attempts: dict[int, set[int]] = {}
    for job_id, attempt, _ in live:
        attempts.setdefault(job_id, set()).add(attempt)
    jobs = {
        pk: (state, attempt, gpus)
        for pk, state, attempt, gpus in Job.objects.values_list(
            "id", "state", "attempt", "num_gpus"
        )
    }
    for job_id, job_attempts in attempts.items():
        state, attempt, gpus = jobs[job_id]
        assert job_attempts == {attempt}, f"job {job_id} holds devices in two attempts"
        assert state in HOLDING_STATES, f"job {job_id} is {state} but holds devices"
        held = sum(1 for j, _, _ in live if j == job_id)
        assert held == gpus, f"job {job_id} holds {held} of its {gpus} GPUs"
    for job_id, (state, _, gpus) in jobs.items():
        assert state in JobState.values
        if state in HOLDING_STATES and gpus > 0:
            assert job_id in attempts, f"job {job_id} is {state} without devices"
