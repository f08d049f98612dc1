"""A hardware fault reported while a node is out of service is kept in its reason: the
agent forgets an Xid once delivered, so the admin must read it before undraining."""

from __future__ import annotations

import pytest

from agents.heartbeats import agent_heartbeat_record
from cluster.choices import NodeState
from cluster.models import Node
from tests.factories import DeviceFactory, NodeFactory


def _gpu0(
    xids: list[int], *, uuid: str = "GPU-8f6c2a1e-1111-2222-3333-444455556666"
) -> dict[str, object]:
    """GPU 0 of an A100 node, idle, as its agent reports it, with these Xid errors."""
    return {
        "index": 0,
        "uuid": uuid,
        "name": "NVIDIA A100-SXM4-80GB",
        "lost": False,
        "memory_total_mb": 81920,
        "memory_used_mb": 0,
        "utilization_pct": 0,
        "temperature_c": 40,
        "power_w": 60.0,
        "ecc_uncorrected": 0,
        "xid_errors": xids,
        "processes": [],
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "return_state"),
    [
        (NodeState.DRAINING, ""),
        (NodeState.DRAINED, ""),
        (NodeState.DOWN, ""),  # an admin's DOWN: heartbeats do not bring it back
    ],
)
def test_a_fault_on_a_node_out_of_service_goes_in_front_of_its_reason(
    state: str, return_state: str
) -> None:
    node = NodeFactory(state=state, return_state=return_state, state_reason="Drained by root: BIOS")
    DeviceFactory(node=node, index=0, uuid="GPU-aa", memory_mb=81920)
    gpu = _gpu0([79], uuid="GPU-aa")

    assert agent_heartbeat_record(node=node, heartbeat={"gpus": [gpu]})["drained"] is True
    lost = {**gpu, "lost": True, "xid_errors": []}
    agent_heartbeat_record(node=node, heartbeat={"gpus": [lost]})
    agent_heartbeat_record(node=node, heartbeat={"gpus": [lost]})  # a lost GPU: every beat

    node = Node.objects.get(pk=node.pk)
    assert (node.state, node.return_state) == (state, return_state)
    assert node.state_reason == (
        "Drained: Xid 79 on GPU 0 (GPU-aa); "
        "GPU 0 (GPU-aa) is lost: NVML cannot reach it; Drained by root: BIOS"
    )


UUID0 = _gpu0([])["uuid"]
UUID1 = "GPU-8f6c2a1e-aaaa-bbbb-cccc-ddddeeeeffff"
XID = f"Xid 79 on GPU 0 ({UUID0})"
MISSING = f"GPU 1 ({UUID1}) is missing from the agent's report"


def _beats_with_alternating_faults(admin_reason: str) -> list[str]:
    """GPU 1 fell off the bus (missing from every report); GPU 0 logs an Xid now and
    then: the node's reason after each of six heartbeats."""
    node = NodeFactory(state=NodeState.DRAINED, state_reason=admin_reason)
    DeviceFactory(node=node, index=0, uuid=UUID0)
    DeviceFactory(node=node, index=1, uuid=UUID1)
    reasons = []
    for beat in range(6):
        agent_heartbeat_record(node=node, heartbeat={"gpus": [_gpu0([79] if beat % 2 else [])]})
        reasons.append(Node.objects.get(pk=node.pk).state_reason)
    return reasons


@pytest.mark.django_db
def test_faults_that_come_and_go_are_each_named_once_before_the_admins_reason() -> None:
    reasons = _beats_with_alternating_faults("Drained by root: BIOS update, ticket #42")

    assert reasons[0] == f"Drained: {MISSING}; Drained by root: BIOS update, ticket #42"
    assert set(reasons[1:]) == {
        f"Drained: {MISSING}; {XID}; Drained by root: BIOS update, ticket #42"
    }


@pytest.mark.django_db
def test_faults_too_long_for_the_reason_are_cut_and_who_drained_it_and_why_kept_whole() -> None:
    admin = "Drained by lab-admin-jsmith: PSU fan failing; replacement ordered. " + "x" * 140

    reasons = _beats_with_alternating_faults(admin)

    assert all(len(reason) <= 255 and reason.endswith(f"; {admin}") for reason in reasons)
    assert reasons[1].startswith(f"Drained: {MISSING[:10]}")
    assert reasons[1].removesuffix(f"; {admin}").endswith("…")
    assert len(set(reasons[1:])) == 1  # the cut fault counts as named: nothing churns
