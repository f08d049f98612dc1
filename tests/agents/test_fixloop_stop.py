"""Stopping a preempted attempt: a stop that leaves the process running keeps its GPUs
busy, and a stop that can never reach the node takes the node down instead of leaving the
job PREEMPTING for ever. Through a real OpenSSH server."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import runtimes, services
from agents.models import NodeHostKey
from agents.services import AttemptStatus, agent_launch, agent_logs_tail, agent_node_poll
from agents.tasks import agent_stop_task
from cluster.choices import NodeState
from cluster.models import Device, Node
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_preempt, job_start
from tests.agents.conftest import group_alive, started_job, wait_for
from tests.factories import JobFactory

STUBBORN = ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"]
# Another host key than the test server's: the node was reinstalled.
OTHER_HOST_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _preempted(node: Node, run_root: Path, owner) -> tuple[Job, int]:  # type: ignore[no-untyped-def]
    job = started_job(node, command=STUBBORN, owner=owner)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    job_preempt(job_id=job.pk, reason="test")
    return job, int((run_root / f"gpulab-{job.pk}-1" / "pid").read_text())


@pytest.mark.parametrize("after_stop", ["running", "unreadable"])
def test_a_stop_that_leaves_the_process_running_requeues_but_keeps_its_gpu_until_the_poll(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch, after_stop: str
) -> None:  # type: ignore[no-untyped-def]
    Device.objects.filter(node=ssh_node, index=1).delete()  # one GPU
    job, pgid = _preempted(ssh_node, ssh_settings, owner)
    # The kill did not take (a process stuck in the kernel), or docker could not say.
    monkeypatch.setattr(
        services, "_stop_attempt", lambda session, **kwargs: AttemptStatus(after_stop)
    )

    services.agent_stop(job_id=job.pk, attempt=1, grace_seconds=0)

    assert Job.objects.get(pk=job.pk).state == JobState.PENDING  # the preemptor need not wait
    allocation = Allocation.objects.get(job=job)
    assert allocation.ended_at is not None and allocation.released_at is None
    monkeypatch.undo()
    agent_node_poll(node_id=ssh_node.pk, grace_seconds=1)  # no longer live: stale, stopped
    assert not group_alive(pgid)
    assert Allocation.objects.get(job=job).released_at is not None


def test_a_stop_that_ended_the_process_frees_its_gpu_at_once(
    ssh_node: Node, ssh_settings: Path, owner
) -> None:  # type: ignore[no-untyped-def]
    job, pgid = _preempted(ssh_node, ssh_settings, owner)

    services.agent_stop(job_id=job.pk, attempt=1, grace_seconds=0)

    assert not group_alive(pgid)
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert Allocation.objects.get(job=job).released_at is not None


def test_a_stop_refused_by_a_changed_host_key_takes_the_node_down_and_requeues_its_jobs(
    ssh_node: Node, ssh_settings: Path, owner, outsider
) -> None:  # type: ignore[no-untyped-def]
    job, _ = _preempted(ssh_node, ssh_settings, owner)
    neighbour = JobFactory(owner=outsider, command=["sleep", "600"])
    neighbour = job_start(job_id=neighbour.pk, device_ids=[ssh_node.devices.get(index=1).pk])
    # The node was reinstalled; its agent still sends heartbeats, so the liveness sweep
    # never takes it down.
    NodeHostKey.objects.filter(node=ssh_node).update(key_base64=OTHER_HOST_KEY)

    agent_stop_task.apply(kwargs={"job_id": job.pk, "attempt": 1, "grace_seconds": 0})

    node = Node.objects.get(pk=ssh_node.pk)
    assert node.state == NodeState.DOWN
    assert node.state_reason == "Host key not approved for SSH; an admin must review it."
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert Job.objects.get(pk=neighbour.pk).state == JobState.PENDING


def test_a_stop_that_cannot_reach_the_node_through_every_retry_takes_it_down(
    ssh_node: Node, ssh_settings: Path, owner
) -> None:  # type: ignore[no-untyped-def]
    job, _ = _preempted(ssh_node, ssh_settings, owner)
    Node.objects.filter(pk=ssh_node.pk).update(ssh_port=1)  # nothing answers there

    agent_stop_task.apply(kwargs={"job_id": job.pk, "attempt": 1, "grace_seconds": 0})

    node = Node.objects.get(pk=ssh_node.pk)
    assert (node.state, node.state_reason) == (NodeState.DOWN, "Unreachable over SSH.")
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING  # its preemptor waits no more


def test_a_stop_on_a_misconfigured_worker_blames_no_node(
    ssh_node: Node, ssh_settings: Path, owner, settings
) -> None:  # type: ignore[no-untyped-def]
    job, _ = _preempted(ssh_node, ssh_settings, owner)
    settings.GPULAB_SSH_KEY_FILE = str(ssh_settings / "no-such-key")

    agent_stop_task.apply(kwargs={"job_id": job.pk, "attempt": 1, "grace_seconds": 0})

    assert Node.objects.get(pk=ssh_node.pk).state == NodeState.UP
    assert Job.objects.get(pk=job.pk).state == JobState.PREEMPTING  # asked for again later


def test_a_stop_giving_up_after_its_job_moved_on_leaves_the_node_up(
    ssh_node: Node, ssh_settings: Path, owner
) -> None:  # type: ignore[no-untyped-def]
    job, _ = _preempted(ssh_node, ssh_settings, owner)
    services.agent_stop(job_id=job.pk, attempt=1, grace_seconds=1)  # another delivery
    NodeHostKey.objects.filter(node=ssh_node).update(key_base64=OTHER_HOST_KEY)

    agent_stop_task.apply(kwargs={"job_id": job.pk, "attempt": 1, "grace_seconds": 0})

    assert Node.objects.get(pk=ssh_node.pk).state == NodeState.UP


def test_the_poll_keeps_the_gpu_of_a_stale_attempt_its_stop_did_not_end(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    Device.objects.filter(node=ssh_node, index=1).delete()
    job, pgid = _preempted(ssh_node, ssh_settings, owner)
    monkeypatch.setattr(
        services, "_stop_attempt", lambda session, **kwargs: AttemptStatus("running")
    )
    services.agent_stop(job_id=job.pk, attempt=1, grace_seconds=0)
    # The poll's stop does not take either (a process in uninterruptible sleep).
    monkeypatch.setattr(runtimes, "wrapped_stop_all_script", lambda run_dirs, grace: "true")

    counts = agent_node_poll(node_id=ssh_node.pk, grace_seconds=0)

    assert counts["stopped"] == 1 and group_alive(pgid)
    assert Allocation.objects.get(job=job).released_at is None
    monkeypatch.undo()
    agent_node_poll(node_id=ssh_node.pk, grace_seconds=0)
    assert not group_alive(pgid)
    assert Allocation.objects.get(job=job).released_at is not None


def test_the_poll_releases_nothing_when_the_node_cannot_list_what_runs(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    Device.objects.filter(node=ssh_node, index=1).delete()
    job, pgid = _preempted(ssh_node, ssh_settings, owner)
    monkeypatch.setattr(
        services, "_stop_attempt", lambda session, **kwargs: AttemptStatus("unreadable")
    )
    services.agent_stop(job_id=job.pk, attempt=1, grace_seconds=0)
    # As `docker ps` answers when the daemon is down: an error, and no list.
    monkeypatch.setattr(
        runtimes, "wrapped_list_script", lambda run_root: "echo 'cannot list' >&2; exit 1"
    )

    agent_node_poll(node_id=ssh_node.pk, grace_seconds=0)

    assert group_alive(pgid)
    assert Allocation.objects.get(job=job).released_at is None
