"""A node's way back after an outage: a drain survives it, an admin's DOWN is not undone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.services import node_heartbeat_seen, node_liveness_sweep
from cluster.choices import NodeState
from cluster.models import Node
from tests.factories import NodeFactory


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("before", "returns_to"),
    [
        (NodeState.UP, NodeState.UP),
        (NodeState.SUSPECT, NodeState.UP),
        (NodeState.DRAINING, NodeState.DRAINING),
        (NodeState.DRAINED, NodeState.DRAINED),
    ],
)
def test_a_node_down_for_silence_remembers_where_it_returns(before, returns_to):
    long_ago = timezone.now() - timedelta(hours=1)
    node = NodeFactory(state=before, last_heartbeat_at=long_ago)
    assert node.name in node_liveness_sweep()["down"]
    node.refresh_from_db()
    assert (node.state, node.return_state) == (NodeState.DOWN, returns_to)
    assert node_heartbeat_seen(node_id=node.pk) is True  # it needs the reconcile to come back


@pytest.mark.django_db
def test_heartbeats_do_not_undo_an_admins_down():
    node = NodeFactory(state=NodeState.DOWN, last_heartbeat_at=timezone.now())
    assert node_heartbeat_seen(node_id=node.pk) is False
    assert Node.objects.get(pk=node.pk).state == NodeState.DOWN
