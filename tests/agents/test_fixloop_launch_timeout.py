"""A launch that runs past GPULAB_LAUNCH_TIMEOUT_SECONDS (a slow image pull) fails its job,
not its node: through a real OpenSSH server."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from agents import services
from agents.services import agent_launch
from agents.ssh import CommandTimedOut, NodeUnreachable, node_ssh
from agents.tasks import agent_launch_task
from cluster.choices import NodeState
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_start
from tests.agents.conftest import started_job, wait_for
from tests.factories import JobFactory


def _running(pid: int) -> bool:
    """Whether `pid` runs: a zombie waiting for its reaper has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _slow_launch(monkeypatch, job_id: int, script: str) -> None:  # type: ignore[no-untyped-def]
    """The launch of `job_id` runs `script` on the node instead of its runtime's command."""
    real = services._launch_script
    monkeypatch.setattr(
        services,
        "_launch_script",
        lambda spec, runtime: script if spec.job_id == job_id else real(spec, runtime),
    )


def _big_job_on_second_gpu(node: Node, owner) -> Job:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, command=["true"])
    return job_start(job_id=job.pk, device_ids=[node.devices.get(index=1).pk])


def test_a_launch_past_its_deadline_fails_its_job_and_leaves_the_node_and_its_jobs_alone(
    ssh_node: Node, ssh_settings: Path, owner, outsider, monkeypatch, settings
) -> None:  # type: ignore[no-untyped-def]
    healthy = started_job(ssh_node, command=["sleep", "600"], owner=outsider)
    agent_launch(job_id=healthy.pk, attempt=healthy.attempt)
    big = _big_job_on_second_gpu(ssh_node, owner)
    settings.GPULAB_LAUNCH_TIMEOUT_SECONDS = 1
    pid_file = ssh_settings / "pulling.pid"
    # `docker run` pulling an image for longer than the deadline.
    _slow_launch(monkeypatch, big.pk, f"echo $$ > {pid_file}; sleep 30")

    agent_launch_task.apply(kwargs={"job_id": big.pk, "attempt": big.attempt})

    node = Node.objects.get(pk=ssh_node.pk)
    assert (node.state, node.state_reason) == (NodeState.UP, "")
    assert Job.objects.get(pk=healthy.pk).state == JobState.RUNNING
    big.refresh_from_db()
    assert big.state == JobState.FAILED
    assert big.reason.startswith(f"Launch on {ssh_node.name} did not finish within 1 s")
    # The node's own deadline killed the launch, so nothing of it can start later: the
    # GPU is free at once.
    wait_for(lambda: not _running(int(pid_file.read_text())))
    assert Allocation.objects.get(job=big).released_at is not None


def test_a_launch_whose_deadline_the_node_never_reports_is_the_nodes_trouble(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch, settings
) -> None:  # type: ignore[no-untyped-def]
    big = _big_job_on_second_gpu(ssh_node, owner)
    settings.GPULAB_LAUNCH_TIMEOUT_SECONDS = 1
    settings.GPULAB_SSH_TIMEOUT_SECONDS = 2
    # A child in its own session outlives the node's kill and keeps the channel open: the
    # worker's deadline passes with no answer, as on a node too sick to report the kill.
    _slow_launch(monkeypatch, big.pk, "setsid sleep 8")

    # Raised for the task, which retries and at last takes the node down
    # (`agent_launch_gave_up`): the job is not charged for the node's trouble.
    with pytest.raises(CommandTimedOut):
        agent_launch(job_id=big.pk, attempt=big.attempt)

    big.refresh_from_db()
    assert big.state == JobState.STARTING
    assert Allocation.objects.get(job=big).ended_at is None


def test_a_launch_killed_at_its_deadline_reports_137_also_where_sh_is_bash(
    ssh_node: Node, ssh_settings: Path
) -> None:
    # bash, unlike dash, replaces a shell with its last command: `timeout` killing itself
    # would then reach sshd as a signal (paramiko: exit status -1), not as 137.
    bounded = services._launch_bounded("sleep 30", 1)
    with node_ssh(ssh_node) as session:
        # `exec`: the login shell that runs the command is bash too, on such nodes.
        result = session.run("exec " + shlex.join(["bash", "-c", bounded]), timeout=20)
    assert result.exit_status == services.LAUNCH_KILLED_EXIT


def test_a_command_past_its_deadline_is_told_apart_from_a_node_that_cannot_be_reached(
    ssh_node: Node,
) -> None:
    with node_ssh(ssh_node) as session, pytest.raises(CommandTimedOut):
        session.run("sleep 5", timeout=1)
    # Still a NodeUnreachable for every caller that only retries or reports one.
    assert issubclass(CommandTimedOut, NodeUnreachable)
    Node.objects.filter(pk=ssh_node.pk).update(ssh_port=1)  # nothing listens there
    unreachable = Node.objects.get(pk=ssh_node.pk)
    with pytest.raises(NodeUnreachable) as refused, node_ssh(unreachable):
        pass
    assert not isinstance(refused.value, CommandTimedOut)
