"""A DOWN node's heartbeats queue one return reconcile at a time, not one each.

Its agent keeps sending a heartbeat every 10 s while the reconcile runs; each copy would
hold an SSH worker slot and send the stale attempts SIGTERM again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from celery.exceptions import Retry
from django.utils import timezone

from agents import services, tasks
from agents.heartbeats import agent_heartbeat_record, agent_heartbeat_refused
from agents.node_agent.collector import NvmlCollector
from agents.node_agent.simnvml import SimGpu, SimulatedNvml
from agents.services import node_return_reconcile
from agents.ssh import NodeUnreachable
from cluster.choices import NodeState
from cluster.models import Node

RECONCILE = "agents.node_return_reconcile"


@pytest.fixture
def returning(node: Node, settings: Any) -> Node:
    """`node`, taken DOWN by the liveness sweep (it remembers where to return)."""
    settings.GPULAB_SCHEDULER_MODE = "celery"
    Node.objects.filter(pk=node.pk).update(
        state=NodeState.DOWN, return_state=NodeState.UP, last_heartbeat_at=timezone.now()
    )
    return Node.objects.get(pk=node.pk)


def _heartbeats(node: Node, count: int, capture: Callable[..., Any]) -> None:
    """`count` heartbeats 10 s apart, each committed (so each asks for the reconcile)."""
    payload = NvmlCollector(SimulatedNvml([SimGpu(uuid="GPU-aa")]), job_of=lambda pid: None)
    start = timezone.now()
    for index in range(count):
        with capture(execute=True):
            agent_heartbeat_record(
                node=node,
                heartbeat=payload.collect(),
                now=start + timedelta(seconds=10 * index),
            )


def _reconciles(published: list[tuple[str, dict]]) -> list[dict]:
    return [kwargs for name, kwargs in published if name == RECONCILE]


def test_six_heartbeats_of_a_returning_node_queue_one_reconcile(
    returning: Node, celery_published: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _heartbeats(returning, 6, django_capture_on_commit_callbacks)

    assert _reconciles(celery_published()) == [{"node_id": returning.pk}]


def test_a_refused_heartbeat_asks_under_the_same_guard(
    returning: Node, celery_published: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _heartbeats(returning, 1, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        agent_heartbeat_refused(node=returning, errors={"gpus": ["bad"]})

    assert len(_reconciles(celery_published())) == 1


def test_once_the_reconcile_ended_the_next_heartbeat_may_ask_again(
    returning: Node, celery_published: Any, django_capture_on_commit_callbacks: Any, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # The reconcile ran but the node could not list what runs on it... as SSH misconfigured
    # on this worker: the node stays DOWN and its next heartbeat must ask again.
    monkeypatch.setattr(tasks, "node_return_reconcile", lambda **kwargs: [])
    _heartbeats(returning, 1, django_capture_on_commit_callbacks)
    assert len(_reconciles(celery_published())) == 1

    tasks.node_return_reconcile_task.apply(kwargs={"node_id": returning.pk})
    _heartbeats(returning, 2, django_capture_on_commit_callbacks)

    assert len(_reconciles(celery_published())) == 2  # the first, and one more now


def test_a_reconcile_waiting_for_its_retry_keeps_the_guard(
    returning: Node, celery_published: Any, django_capture_on_commit_callbacks: Any, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    def unreachable(**kwargs: Any) -> list:
        raise NodeUnreachable("no route to host")

    monkeypatch.setattr(tasks, "node_return_reconcile", unreachable)
    _heartbeats(returning, 1, django_capture_on_commit_callbacks)
    assert len(_reconciles(celery_published())) == 1

    # As a worker runs it (not eagerly, which would run the retries at once).
    tasks.node_return_reconcile_task.push_request(
        id="t-1",
        called_directly=False,
        is_eager=False,
        retries=0,
        args=[],
        kwargs={"node_id": returning.pk},
    )
    try:
        with pytest.raises(Retry):
            tasks.node_return_reconcile_task.run(node_id=returning.pk)
    finally:
        tasks.node_return_reconcile_task.pop_request()
    _heartbeats(returning, 3, django_capture_on_commit_callbacks)

    # The first request and its retry: no heartbeat added a copy beside them.
    assert _reconciles(celery_published()) == [{"node_id": returning.pk}] * 2


def test_a_reconcile_of_a_node_that_is_back_already_does_no_ssh_work(
    returning: Node, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    Node.objects.filter(pk=returning.pk).update(state=NodeState.UP, return_state="")

    def no_ssh(node: Node) -> Any:
        raise AssertionError("no SSH for a node that is back")

    monkeypatch.setattr(services, "node_ssh", no_ssh)

    assert node_return_reconcile(node_id=returning.pk, grace_seconds=0) == []
