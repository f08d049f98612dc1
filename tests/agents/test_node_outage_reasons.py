"""A node's reason and way back across an outage: two launches giving up on it at once
leave it to come back by itself, and a drained node returns with who drained it and why."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents import services
from agents.heartbeats import agent_heartbeat_record
from agents.services import (
    agent_launch_gave_up,
    node_heartbeat_seen,
    node_liveness_sweep,
    node_return_reconcile,
)
from agents.ssh import NodeUnreachable
from cluster.choices import NodeState
from cluster.models import Node
from cluster.services import node_drain, node_undrain
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import job_start
from tests.agents.conftest import reported_gpus, started_job
from tests.factories import DeviceFactory, JobFactory, NodeFactory


def test_a_second_launch_giving_up_on_a_node_already_down_keeps_its_way_back(
    db: None, monkeypatch: Any
) -> None:
    node = NodeFactory(name="flaky", last_heartbeat_at=timezone.now())
    DeviceFactory(node=node, index=0)
    second_gpu = DeviceFactory(node=node, index=1)
    first = started_job(node, command=["a"])
    second = job_start(job_id=JobFactory(command=["b"]).pk, device_ids=[second_gpu.pk])
    # The race made deterministic: the first give-up has taken the node down but its
    # requeue loop has not reached the second job yet, whose launch gives up now.
    real = services.live_attempts_on_node
    monkeypatch.setattr(services, "live_attempts_on_node", lambda **kw: [])
    agent_launch_gave_up(job_id=first.pk, attempt=first.attempt, error=NodeUnreachable("x"))
    monkeypatch.setattr(services, "live_attempts_on_node", real)
    assert Job.objects.get(pk=second.pk).state == JobState.STARTING

    agent_launch_gave_up(job_id=second.pk, attempt=second.attempt, error=NodeUnreachable("x"))

    node.refresh_from_db()
    assert (node.state, node.return_state) == (NodeState.DOWN, NodeState.UP)
    assert node.state_reason == "Unreachable over SSH."
    assert Job.objects.get(pk=second.pk).state == JobState.PENDING  # requeued all the same
    assert node_heartbeat_seen(node_id=node.pk) is True  # comes back once it answers


def test_a_drained_node_returns_from_an_outage_with_its_drains_reason(ssh_node: Node) -> None:
    node_drain(node_id=ssh_node.pk, reason="PSU fan, ticket #42", by_username="root")
    long_ago = timezone.now() - timedelta(hours=1)
    Node.objects.filter(pk=ssh_node.pk).update(last_heartbeat_at=long_ago)
    assert ssh_node.name in node_liveness_sweep()["down"]
    down = Node.objects.get(pk=ssh_node.pk)
    assert (down.state, down.return_state) == (NodeState.DOWN, NodeState.DRAINED)
    # Both, while it is down: why it is down, and the drain it comes back to.
    assert down.state_reason.startswith("No heartbeat for ")
    assert down.state_reason.endswith(" On return: Drained by root: PSU fan, ticket #42")

    assert node_heartbeat_seen(node_id=ssh_node.pk) is True
    node_return_reconcile(node_id=ssh_node.pk, grace_seconds=0)

    back = Node.objects.get(pk=ssh_node.pk)
    assert (back.state, back.state_reason) == (
        NodeState.DRAINED,
        "Drained by root: PSU fan, ticket #42",
    )


def test_a_fault_reported_on_its_return_goes_in_front_of_the_drains_reason(
    ssh_node: Node,
) -> None:
    node_drain(node_id=ssh_node.pk, reason="BIOS update", by_username="root")
    long_ago = timezone.now() - timedelta(hours=1)
    Node.objects.filter(pk=ssh_node.pk).update(last_heartbeat_at=long_ago)
    node_liveness_sweep()
    ssh_node.refresh_from_db()
    heartbeat = {"gpus": reported_gpus(ssh_node, xid_errors=[79])}

    agent_heartbeat_record(node=ssh_node, heartbeat=heartbeat)
    agent_heartbeat_record(node=ssh_node, heartbeat=heartbeat)  # recorded once only
    node_return_reconcile(node_id=ssh_node.pk, grace_seconds=0)

    back = Node.objects.get(pk=ssh_node.pk)
    xid = "Xid 79 on GPU {0} (GPU-sshnode-{0})"
    assert (back.state, back.state_reason) == (
        NodeState.DRAINED,
        f"Drained: {xid.format(0)}; {xid.format(1)}; Drained by root: BIOS update",
    )


# ----------------------------------------------- admin and heartbeats during the return


def _down_and_answering(node: Node, monkeypatch: Any, during_ssh: Any, **fields: Any) -> Node:
    """`node` (the test sshd) taken down by the sweep and answering again; `during_ssh`
    runs while its return reconcile stops stale attempts over SSH (seconds, on a real
    node), before the real stop."""
    long_ago = timezone.now() - timedelta(hours=1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=long_ago, **fields)
    assert node_liveness_sweep()["down"] == [node.name]
    real_stop_stale = services._stop_stale

    def stop_stale(session: Any, *, keep: Any, grace_seconds: int) -> list[tuple[int, int]]:
        during_ssh(node)
        return real_stop_stale(session, keep=keep, grace_seconds=grace_seconds)

    monkeypatch.setattr(services, "_stop_stale", stop_stale)
    assert node_heartbeat_seen(node_id=node.pk) is True
    node_return_reconcile(node_id=node.pk, grace_seconds=10)
    return Node.objects.get(pk=node.pk)


def test_a_drain_during_the_return_reconcile_keeps_the_node_drained(
    ssh_node: Node, monkeypatch: Any
) -> None:
    def drain(node: Node) -> None:
        node_drain(node_id=node.pk, reason="bad fan, RMA", by_username="root")

    back = _down_and_answering(ssh_node, monkeypatch, drain)

    assert (back.state, back.state_reason) == (NodeState.DRAINED, "Drained by root: bad fan, RMA")


def test_an_undrain_during_the_return_reconcile_brings_the_node_back_up(
    ssh_node: Node, monkeypatch: Any
) -> None:
    def undrain(node: Node) -> None:
        node_undrain(node_id=node.pk, by_username="root")

    back = _down_and_answering(
        ssh_node,
        monkeypatch,
        undrain,
        state=NodeState.DRAINED,
        state_reason="Drained by root: BIOS",
    )

    assert (back.state, back.state_reason) == (NodeState.UP, "")


def test_a_fault_reported_during_the_return_reconcile_keeps_the_node_drained(
    ssh_node: Node, monkeypatch: Any
) -> None:
    def fault(node: Node) -> None:
        agent_heartbeat_record(node=node, heartbeat={"gpus": reported_gpus(node, xid_errors=[79])})

    back = _down_and_answering(ssh_node, monkeypatch, fault)

    assert (back.state, back.state_reason) == (
        NodeState.DRAINED,
        "Drained: Xid 79 on GPU 0 (GPU-sshnode-0); Xid 79 on GPU 1 (GPU-sshnode-1)",
    )


# A drain reason as long as the dashboard takes (200), by an admin with a long username.
LONG_DRAIN = (
    "Drained by lab-admin-jsmith: "
    + ("PSU fan failing; replacement ordered from Dell, parts arrive next week. " * 3)[:196]
    + " #4711"
)


def test_an_outage_cuts_its_own_reason_to_keep_the_drains_whole(ssh_node: Node) -> None:
    node = ssh_node
    node_drain(node_id=node.pk, reason=LONG_DRAIN.split(": ", 1)[1], by_username="lab-admin-jsmith")

    for _ in range(2):  # two outages in a row: nothing is lost twice either
        drained = Node.objects.get(pk=node.pk)
        services._node_take_down(
            node=drained,
            reason="Host key not approved for SSH; an admin must review it.",
            expected=[drained.state],
        )
        down = Node.objects.get(pk=node.pk)
        assert len(down.state_reason) == 255
        assert down.state_reason.startswith("Host key")
        assert down.state_reason.endswith(f"… On return: {LONG_DRAIN}")
        node_heartbeat_seen(node_id=node.pk)
        node_return_reconcile(node_id=node.pk, grace_seconds=0)
        back = Node.objects.get(pk=node.pk)
        assert (back.state, back.state_reason) == (NodeState.DRAINED, LONG_DRAIN)
