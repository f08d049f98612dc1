"""Drain and undrain: no new jobs on a draining node, running ones finish, then DRAINED."""

from __future__ import annotations

from django.urls import reverse

from accounts.models import User
from cluster.choices import NodeState
from cluster.models import Node
from cluster.services import node_drain, node_drain_settle, node_undrain
from jobs.services import job_finish, job_mark_running
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, NodeFactory


def _node() -> Node:
    node = NodeFactory()
    DeviceFactory(node=node, index=0)
    return node


def test_an_idle_node_is_drained_at_once(db: None) -> None:
    node = node_drain(node_id=_node().pk, reason="maintenance", by_username="root")
    assert (node.state, node.state_reason) == (NodeState.DRAINED, "Drained by root: maintenance")


def test_a_busy_node_drains_until_its_last_job_finishes(db: None) -> None:
    node = _node()
    job = started_job(node, command=["sleep", "10"])
    job_mark_running(job_id=job.pk)

    assert node_drain(node_id=node.pk, reason="fan noise").state == NodeState.DRAINING
    assert node_drain_settle() == []
    job_finish(job_id=job.pk, exit_code=0)

    assert node_drain_settle() == [node.name]
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED


def test_undrain_puts_a_draining_or_drained_node_back_up(db: None) -> None:
    node = _node()
    node_drain(node_id=node.pk, reason="x")
    undrained = node_undrain(node_id=node.pk)
    assert (undrained.state, undrained.state_reason) == (NodeState.UP, "")


def test_a_down_node_stays_down_and_a_drain_or_undrain_sets_where_it_returns(db: None) -> None:
    node = NodeFactory(state=NodeState.DOWN, return_state=NodeState.UP)
    drained = node_drain(node_id=node.pk, reason="x")
    assert (drained.state, drained.return_state) == (NodeState.DOWN, NodeState.DRAINED)
    undrained = node_undrain(node_id=node.pk)
    assert (undrained.state, undrained.return_state) == (NodeState.DOWN, NodeState.UP)


def test_admins_drain_and_undrain_from_the_admin(client, lab_admin: User) -> None:  # type: ignore[no-untyped-def]
    lab_admin.is_staff = lab_admin.is_superuser = True
    lab_admin.save()
    client.force_login(lab_admin)
    node = _node()
    url = reverse("admin:cluster_node_changelist")

    client.post(url, {"action": "drain", "_selected_action": [node.pk]})
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED
    client.post(url, {"action": "undrain", "_selected_action": [node.pk]})
    assert Node.objects.get(pk=node.pk).state == NodeState.UP


def test_the_admin_says_which_nodes_it_could_not_drain(client, lab_admin: User) -> None:  # type: ignore[no-untyped-def]
    client.force_login(lab_admin)
    up, drained = _node(), _node()
    Node.objects.filter(pk=drained.pk).update(state=NodeState.DRAINED, state_reason="old")
    url = reverse("admin:cluster_node_changelist")

    response = client.post(
        url, {"action": "drain", "_selected_action": [up.pk, drained.pk]}, follow=True
    )

    texts = [str(message) for message in response.context["messages"]]
    assert texts == [
        f"Drained: {up.name}.",
        "1 node(s) left as they were: only up, suspect or down (not drained) nodes can be.",
    ]
    assert Node.objects.get(pk=drained.pk).state_reason == "old"


def test_the_admin_form_cannot_set_a_nodes_state(client, lab_admin: User) -> None:  # type: ignore[no-untyped-def]
    # A state typed into the form would bypass the services that requeue or protect the
    # node's jobs (a hand-set DOWN used to strand its RUNNING jobs for good).
    client.force_login(lab_admin)
    node = _node()
    page = client.get(reverse("admin:cluster_node_change", args=[node.pk])).content.decode()
    assert 'name="state"' not in page
    assert 'name="return_state"' not in page
