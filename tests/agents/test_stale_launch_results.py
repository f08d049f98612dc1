"""A launch that outlives its attempt reports nothing about the job's newer attempt.

The launch task checks "STARTING at this attempt" once, then spends up to
GPULAB_LAUNCH_TIMEOUT_SECONDS over SSH. Meanwhile the node may go silent, its job be
requeued and placed elsewhere as the next attempt: the old launch's result must neither
fail nor start that attempt, and what the old launch started must be stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents import services
from agents.services import agent_launch, node_liveness_sweep
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_launch_failed, job_mark_running
from scheduler.services import scheduling_round_run
from tests.agents.conftest import group_alive, started_job
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory


@pytest.fixture
def other_node(db: None) -> Node:
    """A second node with one free a100, where the requeued job is placed next."""
    node = NodeFactory(name="other", address="10.9.9.9")
    DeviceFactory(node=node, index=0, device_type=DeviceTypeFactory(name="a100"))
    return node


def _requeue_and_replace_mid_launch(monkeypatch, ssh_node: Node) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Wrap `services.node_ssh`: on the launch's connect, the node goes silent for an
    hour, the liveness sweep requeues its job and a round places it again; then the real
    SSH session goes ahead, as a launch that was already under way would."""
    real_ssh = services.node_ssh
    seen: dict[str, object] = {}

    @contextmanager
    def ssh_after_the_job_moved_on(node: Node) -> Iterator[object]:
        if not seen:
            Node.objects.filter(pk=ssh_node.pk).update(
                last_heartbeat_at=timezone.now() - timedelta(hours=1)
            )
            node_liveness_sweep()
            scheduling_round_run()
            moved = Job.objects.get()
            seen["moved_on"] = (moved.state, moved.attempt)
        with real_ssh(node) as session:
            yield session

    monkeypatch.setattr(services, "node_ssh", ssh_after_the_job_moved_on)
    return seen


def _placed_on(job: Job, attempt: int) -> set[str]:
    return set(
        Allocation.objects.filter(job=job, attempt=attempt).values_list(
            "device__node__name", flat=True
        )
    )


def test_an_old_attempts_failed_launch_leaves_the_newer_attempt_starting(
    ssh_node: Node, other_node: Node, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_NODE_RUN_ROOT = "/proc/cannot-create"  # the launch fails on the node
    job = started_job(ssh_node, command=["sleep", "300"])
    seen = _requeue_and_replace_mid_launch(monkeypatch, ssh_node)

    assert agent_launch(job_id=job.pk, attempt=1) is None

    assert seen["moved_on"] == (JobState.STARTING, 2)
    current = Job.objects.get(pk=job.pk)
    assert (current.state, current.attempt) == (JobState.STARTING, 2)
    assert current.reason == ""
    assert _placed_on(job, 2) == {"other"}


def test_an_old_attempts_successful_launch_is_stopped_and_leaves_the_newer_attempt_starting(
    ssh_node: Node, other_node: Node, ssh_settings: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    job = started_job(ssh_node, command=["sleep", "300"])
    seen = _requeue_and_replace_mid_launch(monkeypatch, ssh_node)

    assert agent_launch(job_id=job.pk, attempt=1) is None

    assert seen["moved_on"] == (JobState.STARTING, 2)
    current = Job.objects.get(pk=job.pk)
    assert (current.state, current.attempt) == (JobState.STARTING, 2)
    assert not current.events.filter(message__startswith="Running on sshnode").exists()
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())
    assert not group_alive(pgid)  # the old attempt's program on sshnode was stopped
    assert Allocation.objects.get(job=job, attempt=1).released_at is not None


@pytest.mark.parametrize(
    "report",
    [
        lambda job_id, attempt: job_mark_running(job_id=job_id, attempt=attempt),
        lambda job_id, attempt: job_launch_failed(job_id=job_id, message="x", attempt=attempt),
    ],
    ids=["mark_running", "launch_failed"],
)
def test_a_launch_report_about_another_attempt_is_refused(other_node: Node, report) -> None:  # type: ignore[no-untyped-def]
    from config.errors import IllegalTransition

    job = started_job(other_node, command=["true"])
    Job.objects.filter(pk=job.pk).update(attempt=2)  # the job moved on to attempt 2

    with pytest.raises(IllegalTransition, match="not 1"):
        report(job.pk, 1)
    assert Job.objects.get(pk=job.pk).state == JobState.STARTING
