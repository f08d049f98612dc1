"""Heartbeat loss → SUSPECT → DOWN → jobs requeued; node return → stale attempts stopped.

The clock is injected (`now=`), so minutes of silence take no time.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents import services
from agents.services import (
    agent_launch,
    node_heartbeat_seen,
    node_liveness_sweep,
    node_return_reconcile,
)
from cluster.choices import NodeState
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import job_mark_running
from tests.agents.conftest import group_alive, started_job, wait_for
from tests.factories import DeviceFactory, NodeFactory

T0 = timezone.now().replace(microsecond=0)


def _node(**fields: object) -> Node:
    node = NodeFactory(last_heartbeat_at=T0, **fields)
    DeviceFactory(node=node, index=0)
    return node


@pytest.mark.parametrize(
    ("state", "silent_seconds", "expected"),
    [
        (NodeState.UP, 39, NodeState.UP),
        (NodeState.UP, 41, NodeState.SUSPECT),
        (NodeState.SUSPECT, 299, NodeState.SUSPECT),
        (NodeState.UP, 301, NodeState.DOWN),
        (NodeState.SUSPECT, 301, NodeState.DOWN),
        (NodeState.DRAINING, 41, NodeState.DRAINING),
        (NodeState.DRAINED, 301, NodeState.DOWN),
        (NodeState.DOWN, 10_000, NodeState.DOWN),
    ],
)
def test_a_silent_node_becomes_suspect_then_down(
    db: None, state: NodeState, silent_seconds: int, expected: NodeState
) -> None:
    node = _node(state=state)

    node_liveness_sweep(now=T0 + timedelta(seconds=silent_seconds))

    node.refresh_from_db()
    assert node.state == expected
    if expected != state:
        assert node.state_reason == f"No heartbeat for {silent_seconds} s."


def test_a_node_that_never_sent_a_heartbeat_and_simulated_nodes_are_not_judged(db: None) -> None:
    never = NodeFactory(last_heartbeat_at=None)
    demo = NodeFactory(last_heartbeat_at=T0, simulated=True)

    node_liveness_sweep(now=T0 + timedelta(hours=1))

    assert Node.objects.get(pk=never.pk).state == NodeState.UP
    assert Node.objects.get(pk=demo.pk).state == NodeState.UP


def test_jobs_of_a_down_node_are_lost_and_requeued_without_using_a_retry(db: None) -> None:
    node = _node()
    running = started_job(node, command=["sleep", "1000"], max_retries=1)
    job_mark_running(job_id=running.pk)

    node_liveness_sweep(now=T0 + timedelta(seconds=41))
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING  # SUSPECT kills nothing
    node_liveness_sweep(now=T0 + timedelta(seconds=301))

    job = Job.objects.get(pk=running.pk)
    assert job.state == JobState.PENDING
    assert job.retries_used == 0
    assert not job.allocations.filter(ended_at__isnull=True).exists()
    states = list(job.events.values_list("to_state", flat=True))
    assert states[-2:] == [JobState.LOST, JobState.PENDING]
    assert "went down" in job.reason


def test_a_heartbeat_brings_a_suspect_node_straight_back(db: None) -> None:
    node = _node()
    node_liveness_sweep(now=T0 + timedelta(seconds=41))

    needs_reconcile = node_heartbeat_seen(node_id=node.pk, now=T0 + timedelta(seconds=45))

    assert not needs_reconcile
    assert Node.objects.get(pk=node.pk).state == NodeState.UP


def test_a_returning_down_node_has_its_stale_attempts_stopped_before_it_is_up_again(
    ssh_node: Node, ssh_settings: Path
) -> None:
    Node.objects.filter(pk=ssh_node.pk).update(last_heartbeat_at=T0)
    job = started_job(ssh_node, command=["sleep", "600"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())

    node_liveness_sweep(now=T0 + timedelta(seconds=301))
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    needs_reconcile = node_heartbeat_seen(node_id=ssh_node.pk, now=T0 + timedelta(seconds=400))
    assert needs_reconcile
    assert Node.objects.get(pk=ssh_node.pk).state == NodeState.DOWN  # nothing starts yet

    stopped = node_return_reconcile(node_id=ssh_node.pk, grace_seconds=1)

    assert stopped == [(job.pk, 1)]
    assert Node.objects.get(pk=ssh_node.pk).state == NodeState.UP
    wait_for(lambda: not group_alive(pgid), timeout=5)


def test_a_heartbeat_between_the_sweeps_read_and_its_update_keeps_the_node_and_its_jobs(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _node(state=NodeState.DRAINING)
    running = started_job(node, command=["sleep", "1000"])
    job_mark_running(job_id=running.pk)
    later = T0 + timedelta(seconds=301)
    real_set_state = services._node_set_state

    def heartbeat_arrives_first(**kwargs):  # type: ignore[no-untyped-def]
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=later)
        return real_set_state(**kwargs)

    monkeypatch.setattr(services, "_node_set_state", heartbeat_arrives_first)

    moved = node_liveness_sweep(now=later)

    assert moved["down"] == []
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINING
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
