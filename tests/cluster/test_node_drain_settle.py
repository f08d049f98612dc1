"""A draining node is DRAINED only once nothing runs there: no live job, and no cancelled
job's process still being stopped (Slurm waits for COMPLETING jobs the same way)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from cluster.choices import NodeState
from cluster.models import Node
from cluster.services import node_drain, node_drain_settle
from dashboard.selectors.cluster import cluster_overview
from jobs.models import Allocation
from jobs.services import job_cancel, job_mark_running
from scheduler.selectors import STOP_CONFIRM_TIMEOUT_SECONDS
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, NodeFactory

pytestmark = pytest.mark.django_db


def _cancelled_on_draining_node(lab_admin: User) -> tuple[Node, Allocation]:
    node = NodeFactory(name="real1")
    DeviceFactory(node=node, index=0)
    job = started_job(node, command=["python", "train.py"])
    job_mark_running(job_id=job.pk)
    assert node_drain(node_id=node.pk, reason="kernel update").state == NodeState.DRAINING
    job_cancel(job_id=job.pk, by=lab_admin)
    allocation = Allocation.objects.get(job=job)
    assert allocation.ended_at is not None and allocation.released_at is None
    return node, allocation


def test_a_cancelled_jobs_process_still_stopping_keeps_the_node_draining(
    lab_admin: User,
) -> None:
    _cancelled_on_draining_node(lab_admin)

    assert node_drain_settle() == []

    row = next(n for n in cluster_overview(viewer=lab_admin).nodes if n.name == "real1")
    assert row.state == NodeState.DRAINING
    assert [device.stopping for device in row.devices] == [True]


def test_the_node_is_drained_once_the_poll_has_seen_the_process_stop(lab_admin: User) -> None:
    node, allocation = _cancelled_on_draining_node(lab_admin)
    Allocation.objects.filter(pk=allocation.pk).update(released_at=timezone.now())

    assert node_drain_settle() == ["real1"]
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED


def test_a_stop_never_confirmed_holds_the_node_only_as_long_as_it_holds_the_gpu(
    lab_admin: User,
) -> None:
    _, allocation = _cancelled_on_draining_node(lab_admin)
    long_ago = timezone.now() - timedelta(seconds=STOP_CONFIRM_TIMEOUT_SECONDS + 60)
    Allocation.objects.filter(pk=allocation.pk).update(started_at=long_ago, ended_at=long_ago)

    assert node_drain_settle() == ["real1"]


def test_draining_a_node_whose_last_job_is_still_stopping_says_draining(
    client, lab_admin: User
) -> None:
    node = NodeFactory(name="real2")
    DeviceFactory(node=node, index=0)
    job = started_job(node, command=["python", "train.py"])
    job_mark_running(job_id=job.pk)
    job_cancel(job_id=job.pk, by=lab_admin)
    client.force_login(lab_admin)

    response = client.post(
        reverse("dashboard:node-drain", args=[node.pk]), {"reason": "reboot"}, follow=True
    )

    assert [str(m) for m in response.context["messages"]] == [
        "Node real2 is draining: its running jobs finish, no new job starts there."
    ]
