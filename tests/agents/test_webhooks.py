"""Node events posted to the admins' webhook (agents/webhooks.py), received by a real HTTP
server on loopback: a node going DOWN, coming back, drained for a GPU fault; never an
admin's own drain; and a receiver that fails never fails the change."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.node_agent.simnvml import SimGpu
from agents.services import node_heartbeat_seen, node_liveness_sweep, node_return_reconcile
from agents.tasks import webhook_post_task
from agents.webhooks import WebhookRefused, node_event_notify, webhook_post
from cluster.choices import NodeState
from cluster.models import Node
from cluster.services import node_drain
from tests.agents.test_agent_faults import Agent
from tests.factories import DeviceFactory, NodeFactory
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.usefixtures("fresh_rate_limits")


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    hook = Receiver()
    settings.GPULAB_ADMIN_WEBHOOK_URL = hook.url
    settings.GPULAB_SITE_URL = "https://gpulab.example.edu"
    yield hook
    hook.server.shutdown()


def test_a_silent_node_going_down_is_posted(db, receiver, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    now = timezone.now()
    node = NodeFactory(name="gpu-3", last_heartbeat_at=now)
    DeviceFactory(node=node, index=0)
    with django_capture_on_commit_callbacks(execute=True):
        node_liveness_sweep(now=now + timedelta(seconds=41))  # SUSPECT: not news yet
    assert receiver.received == []
    with django_capture_on_commit_callbacks(execute=True):
        node_liveness_sweep(now=now + timedelta(seconds=301))
    (body,) = receiver.received
    assert (body["event"], body["node"]) == ("node_down", "gpu-3")
    assert body["reason"] == "No heartbeat for 301 s."
    assert body["text"] == (
        "[gpulab] Node gpu-3 is DOWN: No heartbeat for 301 s. https://gpulab.example.edu/cluster/"
    )
    assert body["site"] == "https://gpulab.example.edu"


def test_a_gpu_fault_drain_is_posted_and_an_admins_drain_is_not(  # type: ignore[no-untyped-def]
    receiver, node, lab_admin, django_capture_on_commit_callbacks
):
    other = NodeFactory(name="gpu-8")
    with django_capture_on_commit_callbacks(execute=True):
        node_drain(node_id=other.pk, reason="maintenance", by=lab_admin)
    assert receiver.received == []

    agent = Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")])
    with django_capture_on_commit_callbacks(execute=True):
        agent.beat()
        agent.nvml.raise_xid("GPU-bb", 79)
        agent.nvml.lose("GPU-bb")
        agent.beat()
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED
    assert receiver.events() == [("node_drained", "gpu-7")]
    assert "Xid 79" in receiver.received[0]["reason"]
    with django_capture_on_commit_callbacks(execute=True):
        agent.beat()  # still faulty: drained already, not posted again
    assert len(receiver.received) == 1


def test_without_a_webhook_nothing_is_posted(settings, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    settings.GPULAB_ADMIN_WEBHOOK_URL = ""
    with django_capture_on_commit_callbacks() as callbacks:
        node_event_notify(event="node_down", node="gpu-1", reason="x")
    assert callbacks == []


def test_a_failing_receiver_never_fails_the_change(  # type: ignore[no-untyped-def]
    db, settings, django_capture_on_commit_callbacks
):  # type: ignore[no-untyped-def]
    broken = Receiver(status=500)
    settings.GPULAB_ADMIN_WEBHOOK_URL = broken.url
    now = timezone.now()
    node = NodeFactory(name="gpu-4", last_heartbeat_at=now)
    with django_capture_on_commit_callbacks(execute=True):
        node_liveness_sweep(now=now + timedelta(seconds=301))
    assert Node.objects.get(pk=node.pk).state == NodeState.DOWN  # the change stands
    assert len(broken.received) == 1  # tried, refused, logged
    with pytest.raises(WebhookRefused, match="answered 500"):
        webhook_post({"text": "x"})
    broken.server.shutdown()
    broken.server.server_close()
    settings.GPULAB_ADMIN_WEBHOOK_URL = broken.url  # nobody listens there any more
    with pytest.raises(WebhookRefused, match="unreachable"):
        webhook_post({"text": "x"})


def test_the_task_retries_a_refused_post_then_drops_it(settings):  # type: ignore[no-untyped-def]
    from celery.exceptions import Retry

    refusing = Receiver(status=503)
    settings.GPULAB_ADMIN_WEBHOOK_URL = refusing.url
    with pytest.raises(Retry):
        webhook_post_task.apply(args=[{"node": "gpu-1"}], throw=True).get()
    last_try = webhook_post_task.apply(
        args=[{"node": "gpu-1"}], retries=webhook_post_task.max_retries
    )
    assert last_try.get() is False
    refusing.server.shutdown()


def test_a_node_back_from_down_is_posted(  # type: ignore[no-untyped-def]
    receiver, ssh_node, ssh_settings, django_capture_on_commit_callbacks
):
    now = timezone.now()
    Node.objects.filter(pk=ssh_node.pk).update(last_heartbeat_at=now)
    with django_capture_on_commit_callbacks(execute=True):
        node_liveness_sweep(now=now + timedelta(seconds=301))
        node_heartbeat_seen(node_id=ssh_node.pk, now=now + timedelta(seconds=400))
        node_return_reconcile(node_id=ssh_node.pk, grace_seconds=1)
    assert receiver.events() == [("node_down", ssh_node.name), ("node_back", ssh_node.name)]
    assert receiver.received[1]["reason"] == "UP"


def test_a_failed_post_never_logs_the_webhooks_secret(db, settings, caplog):  # type: ignore[no-untyped-def]
    # Slack's and Mattermost's webhook URLs carry their secret in the path.
    gone = Receiver()
    gone.server.shutdown()
    gone.server.server_close()
    settings.GPULAB_ADMIN_WEBHOOK_URL = gone.url.replace("/hooks/lab", "/services/T0/B0/SECRET")
    settings.GPULAB_SCHEDULER_MODE = "embedded"  # posted inline, logged here
    from agents.webhooks import webhook_send

    webhook_send({"node": "gpu-1", "text": "x"})
    assert "not sent: webhook unreachable: ConnectionError" in caplog.text
    assert "SECRET" not in caplog.text
    with pytest.raises(WebhookRefused) as refused:
        webhook_post({"text": "x"})
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
