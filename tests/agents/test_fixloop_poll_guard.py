"""The one-poll-per-node guard lasts as long as a poll may run with the grace period in
force, not the longest one an admin could set: a worker killed mid-poll leaves the node
unpolled for minutes, not an hour."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from agents import tasks
from agents.models import NodeHostKey
from agents.services import SSH_MARGIN_SECONDS
from cluster.models import Node
from config.celery_app import SSH_QUEUE, queue_name
from scheduler.models import MAX_PREEMPTION_GRACE_SECONDS
from tests.factories import DeviceFactory, NodeFactory
from tests.scheduler.livefixtures import configure


@pytest.fixture
def polled_node(db: None) -> Node:
    node = NodeFactory(name="real-0")
    DeviceFactory(node=node, index=0)
    NodeHostKey.objects.create(
        node=node, key_type="ssh-ed25519", key_base64="x", fingerprint="x",
        approved_at=timezone.now(),
    )  # fmt: skip
    return node


def _guard_ttls(node_id: int) -> list[int]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    prefix = settings.CACHES["default"]["KEY_PREFIX"]
    return [client.ttl(key) for key in client.scan_iter(f"{prefix}:*:agents:node-poll:{node_id}")]


def test_a_polls_guard_lasts_its_grace_and_the_ssh_margin(
    polled_node: Node, monkeypatch: Any
) -> None:
    configure(preemption_grace_seconds=30)
    seen: list[list[int]] = []

    def poll(*, node_id: int, grace_seconds: int) -> dict[str, int]:
        seen.append(_guard_ttls(node_id))  # what a worker killed now would leave behind
        assert grace_seconds == 30
        return {}

    monkeypatch.setattr(tasks, "agent_node_poll", poll)
    tasks.agent_node_poll_task(polled_node.pk)
    tasks.agent_node_poll_task(polled_node.pk, grace_seconds=30)

    limit = tasks.node_poll_time_limit(30)
    assert limit == 30 + SSH_MARGIN_SECONDS < MAX_PREEMPTION_GRACE_SECONDS
    assert len(seen) == 2
    for (ttl,) in seen:
        assert 0 < ttl <= limit


def test_each_node_poll_is_sent_with_the_grace_its_guard_is_sized_for_and_that_time_limit(
    polled_node: Node,
) -> None:
    configure(preemption_grace_seconds=30)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue = queue_name(SSH_QUEUE)
    client.delete(queue)
    try:
        tasks.agent_poll_all_task()
        (raw,) = client.lrange(queue, 0, -1)
    finally:
        client.delete(queue)
    headers = json.loads(raw)["headers"]
    assert headers["task"] == "agents.node_poll"
    assert headers["kwargsrepr"] == repr({"node_id": polled_node.pk, "grace_seconds": 30})
    # The worker ends the poll when its guard would expire: no two polls of one node.
    hard, _soft = headers["timelimit"]
    assert hard == tasks.node_poll_time_limit(30)
