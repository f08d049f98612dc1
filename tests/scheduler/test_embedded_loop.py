"""The demo's in-process loop does what Celery beat's tasks do in production."""

from __future__ import annotations

import pytest

from cluster.choices import NodeState
from cluster.models import Node
from scheduler.embedded import iterate
from scheduler.models import SchedulingRound
from scheduler.selectors import scheduler_config_get
from tests.factories import DeviceFactory, NodeFactory

LATER = 1e12  # neither the round nor the aggregates are due


@pytest.mark.django_db
def test_a_drained_node_whose_jobs_have_left_becomes_drained() -> None:
    node = NodeFactory(state=NodeState.DRAINING, state_reason="Drained by root: fans")
    DeviceFactory(node=node, index=0)

    iterate(event=False, now=0.0, next_round=LATER, next_aggregates=LATER)

    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED


@pytest.mark.django_db
def test_a_round_runs_when_asked_and_the_next_is_due_one_interval_later() -> None:
    rounds = SchedulingRound.objects.count()

    next_round, next_aggregates = iterate(
        event=True, now=100.0, next_round=LATER, next_aggregates=LATER
    )

    assert SchedulingRound.objects.count() == rounds + 1
    assert next_round == 100.0 + scheduler_config_get().round_interval_seconds
    assert next_aggregates == LATER
