"""Draining a DOWN node (Slurm's DOWN+DRAIN): it stays DOWN and comes back DRAINED, not UP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from agents.services import node_heartbeat_seen, node_liveness_sweep, node_return_reconcile
from cluster.choices import NodeState
from cluster.models import Node
from cluster.services import node_drain, node_undrain
from tests.agents.conftest import (  # the SSH fixtures: a node's return is over SSH
    ssh_node,  # noqa: F401
    ssh_server,  # noqa: F401
    ssh_settings,  # noqa: F401
)
from tests.factories import DeviceFactory, NodeFactory

CLUSTER = reverse("dashboard:cluster")


def _silent_until_down(node: Node) -> Node:
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat_at=timezone.now() - timedelta(seconds=400)
    )
    node_liveness_sweep()
    node = Node.objects.get(pk=node.pk)
    assert (node.state, node.return_state) == (NodeState.DOWN, NodeState.UP)
    return node


def _answers_again(node: Node) -> Node:
    assert node_heartbeat_seen(node_id=node.pk)
    node_return_reconcile(node_id=node.pk, grace_seconds=0)
    return Node.objects.get(pk=node.pk)


def test_a_down_node_an_admin_drains_comes_back_drained_with_the_reason(
    client, lab_admin: User, request: pytest.FixtureRequest
) -> None:
    down = _silent_until_down(request.getfixturevalue("ssh_node"))
    client.force_login(lab_admin)

    response = client.post(
        reverse("dashboard:node-drain", args=[down.pk]), {"reason": "PSU swap"}, follow=True
    )

    assert [str(m) for m in response.context["messages"]] == [
        "Node sshnode is down; it comes back drained, not up, once its agent answers."
    ]
    marked = Node.objects.get(pk=down.pk)
    assert (marked.state, marked.return_state) == (NodeState.DOWN, NodeState.DRAINED)
    # While down, why it is down comes first; the drain is what it comes back with.
    assert marked.state_reason == f"{down.state_reason} On return: Drained by root: PSU swap"
    back = _answers_again(marked)
    assert back.state == NodeState.DRAINED
    assert back.state_reason == "Drained by root: PSU swap"


def test_undraining_a_down_and_drained_node_lets_it_come_back_up(
    lab_admin: User, request: pytest.FixtureRequest
) -> None:
    down = _silent_until_down(request.getfixturevalue("ssh_node"))
    node_drain(node_id=down.pk, reason="PSU swap", by=lab_admin)

    undrained = node_undrain(node_id=down.pk, by=lab_admin)

    assert (undrained.state, undrained.return_state) == (NodeState.DOWN, NodeState.UP)
    assert undrained.state_reason == down.state_reason  # the outage's, the drain's gone
    assert _answers_again(undrained).state == NodeState.UP


@pytest.mark.django_db
def test_the_page_offers_drain_on_a_down_node_then_undrain_once_it_comes_back_drained(
    client, lab_admin: User
) -> None:
    node = NodeFactory(name="gpu3", state=NodeState.DOWN, return_state=NodeState.UP)
    DeviceFactory(node=node, index=0)
    client.force_login(lab_admin)
    drain_url = reverse("dashboard:node-drain", args=[node.pk])
    undrain_url = reverse("dashboard:node-undrain", args=[node.pk])

    page = client.get(CLUSTER).content.decode()
    assert drain_url in page and undrain_url not in page

    client.post(drain_url, {"reason": "bad fan"})
    page = client.get(CLUSTER).content.decode()
    assert drain_url not in page and undrain_url in page
    assert "Down, back drained" in page


@pytest.mark.django_db
def test_the_admin_action_drains_a_down_node_too(client, lab_admin: User) -> None:
    node = NodeFactory(name="gpu4", state=NodeState.DOWN, return_state=NodeState.UP)
    client.force_login(lab_admin)

    response = client.post(
        reverse("admin:cluster_node_changelist"),
        {"action": "drain", "_selected_action": [node.pk]},
        follow=True,
    )

    assert [str(m) for m in response.context["messages"]] == ["Drained: gpu4."]
    assert Node.objects.get(pk=node.pk).return_state == NodeState.DRAINED


@pytest.mark.django_db
def test_a_node_drained_before_its_outage_and_undrained_during_it_keeps_the_outage_reason(
    lab_admin: User,
) -> None:
    node = NodeFactory(state=NodeState.DOWN, return_state=NodeState.DRAINED)
    Node.objects.filter(pk=node.pk).update(
        state_reason="No heartbeat for 300 s. On return: Drained by root: fan"
    )
    assert node_undrain(node_id=node.pk, by=lab_admin).state_reason == "No heartbeat for 300 s."


@pytest.mark.django_db
def test_a_down_node_already_coming_back_drained_keeps_its_first_reason() -> None:
    node = NodeFactory(
        state=NodeState.DOWN, return_state=NodeState.DRAINING, state_reason="Drained: first"
    )
    after = node_drain(node_id=node.pk, reason="second")
    assert (after.return_state, after.state_reason) == (NodeState.DRAINING, "Drained: first")


@pytest.mark.django_db
def test_a_long_drain_of_a_down_node_is_kept_whole_and_the_outage_reason_cut() -> None:
    outage = "No heartbeat for 400 s; the switch port is down, ticket NET-2231 with facilities."
    down = NodeFactory(state=NodeState.DOWN, return_state=NodeState.UP, state_reason=outage)
    reason = ("PSU fan failing; replacement ordered from Dell. " * 5)[:200]

    node_drain(node_id=down.pk, reason=reason, by_username="lab-admin-jsmith")

    marked = Node.objects.get(pk=down.pk)
    drain = f"Drained by lab-admin-jsmith: {reason}"
    assert len(marked.state_reason) == 255
    assert marked.state_reason == f"{outage[:13]}… On return: {drain}"
    node_undrain(node_id=down.pk, by_username="lab-admin-jsmith")  # the cut outage stays
    assert Node.objects.get(pk=down.pk).state_reason == f"{outage[:13]}…"
