"""The apply step against rows that changed after the snapshot was taken.

A round decides on a snapshot, then applies in its own transaction: a cancel, a drain
or a heartbeat may commit in between, and the apply step must not act on what it no
longer sees.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from cluster.choices import NodeState
from cluster.models import Device, Node
from cluster.services import node_drain
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import (
    JobSpec,
    job_cancel,
    job_finish,
    job_mark_running,
    job_start,
    job_submit,
)
from scheduler import services as round_services
from scheduler.core.types import Decisions, Snapshot, Start
from scheduler.policies import decide
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.services import ApplyResult, decisions_apply, scheduling_round_run
from scheduler.snapshot import RoundContext, snapshot_build
from tests.agents.conftest import reported_gpus
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory
from tests.scheduler.livefixtures import (
    age_job,
    assert_consistent,
    configure,
    configure_tiresias_rules,
)


def submit(user, gpus: int) -> Job:
    return job_submit(
        owner=user,
        spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "600"], num_gpus=gpus),
    )


def one_node(*, gpus: int, simulated: bool = False) -> list[Device]:
    """A node of `gpus` v100s; a real one (simulated=False) is never polled in tests."""
    v100 = DeviceTypeFactory(name="v100", speed=1.0)
    node = NodeFactory(name="n0", simulated=simulated)
    return [DeviceFactory(node=node, index=i, device_type=v100) for i in range(gpus)]


def plan() -> tuple[Snapshot, RoundContext, Decisions, datetime]:
    now = timezone.now()
    snapshot, context = snapshot_build(
        now=now, settings=scheduler_settings_from(scheduler_config_get())
    )
    return snapshot, context, decide(snapshot), now


def apply(decisions: Decisions, context: RoundContext, now: datetime) -> ApplyResult:
    with transaction.atomic():
        return decisions_apply(decisions=decisions, context=context, now=now)


@pytest.fixture
def tiresias(db: None) -> None:
    configure_tiresias_rules()


@pytest.mark.django_db
def test_a_start_waits_while_a_victim_cancelled_after_the_snapshot_still_stops(
    owner, outsider, tiresias
):
    devices = one_node(gpus=4)
    veteran = submit(owner, 4)
    job_start(job_id=veteran.pk, device_ids=[d.pk for d in devices])
    job_mark_running(job_id=veteran.pk)
    age_job(veteran.pk, seconds=7200)
    newcomer = submit(outsider, 4)
    _, context, decisions, now = plan()
    assert [p.job_id for p in decisions.preemptions] == [veteran.pk]

    # The owner cancels meanwhile: the allocation ends, but the node has yet to stop it.
    job_cancel(job_id=veteran.pk, by=owner)
    result = apply(decisions, context, now)

    assert result.started == []
    newcomer.refresh_from_db()
    assert newcomer.state == JobState.PENDING
    assert newcomer.reason.startswith("WaitingForResources:")
    assert not Allocation.objects.filter(job=newcomer).exists()
    assert_consistent()


@pytest.mark.django_db
def test_a_start_on_a_gpu_retired_after_the_snapshot_is_dropped(owner, tiresias):
    one_node(gpus=2)
    job = submit(owner, 1)
    _, context, decisions, now = plan()
    (target,) = decisions.starts[0].device_ids
    # A heartbeat reported another GPU in that slot (agents.heartbeats._register_devices).
    Device.objects.filter(pk=target).update(retired_at=timezone.now())

    result = apply(decisions, context, now)

    assert result.started == []
    assert [drop["job"] for drop in result.dropped] == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert not Allocation.objects.filter(job=job).exists()


class _AsSQLite:
    """The test database's connection, reporting itself as SQLite (the demo's path)."""

    vendor = "sqlite"

    def __getattr__(self, name: str) -> Any:
        return getattr(connection, name)


@pytest.mark.django_db
def test_on_sqlite_a_job_cancelled_mid_round_gets_no_queue_reason(owner, tiresias, monkeypatch):
    one_node(gpus=1, simulated=True)
    submit(owner, 1)
    second = submit(owner, 1)
    _, context, decisions, now = plan()
    assert [hold.job_id for hold in decisions.holds] == [second.pk]
    monkeypatch.setattr(round_services, "connection", _AsSQLite())

    job_cancel(job_id=second.pk, by=owner)  # a web request, while the round decides
    apply(decisions, context, now)

    second.refresh_from_db()
    assert second.state == JobState.CANCELLED
    assert second.reason == f"Cancelled by {owner.username}."
    assert second.queue_position is None


def _wait_until_blocked_or_done(thread: threading.Thread, *, seconds: float = 10.0) -> None:
    """Until `thread` has finished, or another backend waits for a lock this one holds."""
    deadline = time.monotonic() + seconds
    while thread.is_alive() and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_a_drain_during_the_round_waits_for_its_starts_and_the_node_stays_draining(
    owner, monkeypatch
):
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL only (SQLite has one writer at a time)")
    configure(placement="best-fit")
    node = one_node(gpus=2, simulated=True)[0].node
    job = submit(owner, 1)
    real_apply_start = round_services._apply_start
    drains: list[threading.Thread] = []

    def admin_drains_meanwhile(*args: Any) -> None:
        def drain() -> None:
            try:
                node_drain(node_id=node.pk, reason="maintenance", by_username="root")
            finally:
                connection.close()

        drains.append(threading.Thread(target=drain))
        drains[0].start()
        _wait_until_blocked_or_done(drains[0])
        real_apply_start(*args)

    monkeypatch.setattr(round_services, "_apply_start", admin_drains_meanwhile)
    scheduling_round = scheduling_round_run()
    drains[0].join()

    node.refresh_from_db()
    live = Allocation.objects.filter(job=job, ended_at__isnull=True).count()
    # The drain waited for the round's commit, then saw its job: DRAINING, not DRAINED.
    assert (scheduling_round.starts, live, node.state) == (1, 1, NodeState.DRAINING)
    assert Node.objects.get(pk=node.pk).state_reason.endswith("maintenance")


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_draining_its_node_does_not_deadlock_with_a_round(monkeypatch) -> None:
    """The round locks every node it starts on; a heartbeat that drains its own node must
    not touch another one (it used to settle every DRAINING node: a lock cycle)."""
    from agents import heartbeats

    v100 = DeviceTypeFactory(name="v100", speed=1.0)
    first, second = NodeFactory(name="m"), NodeFactory(name="n")
    free_on_first, busy_on_first = (DeviceFactory(node=first, index=i, device_type=v100)
                                    for i in range(2))  # fmt: skip
    free_on_second = DeviceFactory(node=second, index=0, device_type=v100)
    leaving = JobFactory(num_gpus=1)
    job_start(job_id=leaving.pk, device_ids=[busy_on_first.pk])
    job_mark_running(job_id=leaving.pk)
    a, b = JobFactory(num_gpus=1), JobFactory(num_gpus=1)
    now = timezone.now()
    _, context = snapshot_build(now=now, settings=scheduler_settings_from(scheduler_config_get()))
    decisions = Decisions(
        starts=(Start(a.pk, (free_on_first.pk,)), Start(b.pk, (free_on_second.pk,)))
    )
    # After the snapshot: "m" is drained while a job runs there, then the job ends: m is
    # DRAINING and idle until a settle.
    node_drain(node_id=first.pk, reason="maintenance")
    job_finish(job_id=leaving.pk, exit_code=0)

    heartbeat_holds_its_node, round_started = threading.Event(), threading.Event()
    record_progress = heartbeats._record_progress

    def slow_progress(*args: Any, **kwargs: Any) -> int:
        heartbeat_holds_its_node.set()
        round_started.wait(5)
        time.sleep(1.0)  # the round now holds m FOR SHARE and waits for n
        return record_progress(*args, **kwargs)

    monkeypatch.setattr(heartbeats, "_record_progress", slow_progress)
    errors: dict[str, Exception] = {}

    def heartbeat() -> None:
        try:
            heartbeats.agent_heartbeat_record(
                node=Node.objects.get(pk=second.pk),
                heartbeat={"gpus": reported_gpus(second, xid_errors=[79]), "jobs": []},
            )
        except Exception as exc:
            errors["heartbeat"] = exc
        finally:
            connection.close()

    def round_apply() -> None:
        try:
            heartbeat_holds_its_node.wait(5)
            round_started.set()
            with transaction.atomic():
                decisions_apply(decisions=decisions, context=context, now=now)
        except Exception as exc:
            errors["round"] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=heartbeat), threading.Thread(target=round_apply)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == {}
    assert Node.objects.get(pk=second.pk).state == NodeState.DRAINED
    assert not Job.objects.filter(pk__in=[a.pk, b.pk], state=JobState.STARTING).exists()
