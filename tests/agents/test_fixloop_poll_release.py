"""A job cancelled (or timed out) while the node poll checks statuses keeps its GPU busy
until a poll has stopped it: through a real OpenSSH server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agents import services
from agents.services import agent_launch, agent_logs_tail, agent_node_poll
from cluster.models import Device, Node
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_cancel, job_submit, jobs_time_out
from scheduler.services import scheduling_round_run
from tests.agents.conftest import group_alive, started_job, wait_for

# Ignores SIGTERM, so only the poll's stop (TERM, grace, KILL) ends it.
STUBBORN = ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"]


def _launched(node: Node, run_root: Path, owner) -> tuple[Job, int]:  # type: ignore[no-untyped-def]
    job = started_job(node, command=STUBBORN, owner=owner)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    return job, int((run_root / f"gpulab-{job.pk}-1" / "pid").read_text())


def _during_status_checks(monkeypatch, event) -> None:  # type: ignore[no-untyped-def]
    """`event` happens right after the poll has checked a status (so after it read the
    attempts it keeps, and before it lists what runs on the node)."""
    real = services._attempt_status

    def checked_then_event(session, **kwargs):  # type: ignore[no-untyped-def]
        status = real(session, **kwargs)
        event()
        return status

    monkeypatch.setattr(services, "_attempt_status", checked_then_event)


def test_a_job_cancelled_during_the_polls_status_checks_keeps_its_gpu_until_it_is_stopped(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    Device.objects.filter(node=ssh_node, index=1).delete()  # one GPU: both jobs want it
    job, pgid = _launched(ssh_node, ssh_settings, owner)
    waiting = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=1))
    _during_status_checks(monkeypatch, lambda: job_cancel(job_id=job.pk, by=owner))

    agent_node_poll(node_id=ssh_node.pk)

    # The poll read the job as live, so left it running: its GPU is not free.
    assert group_alive(pgid)
    assert job.allocations.get().released_at is None
    scheduling_round_run()
    assert Job.objects.get(pk=waiting.pk).state == JobState.PENDING

    monkeypatch.undo()
    agent_node_poll(node_id=ssh_node.pk, grace_seconds=1)  # stops it, then frees the GPU
    assert not group_alive(pgid)
    assert job.allocations.get().released_at is not None
    scheduling_round_run()
    assert Job.objects.get(pk=waiting.pk).state == JobState.STARTING


def test_a_job_timed_out_during_the_polls_status_checks_keeps_its_gpu_until_it_is_stopped(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    job, pgid = _launched(ssh_node, ssh_settings, owner)
    Job.objects.filter(pk=job.pk).update(walltime_seconds=60, total_run_seconds=3600)
    _during_status_checks(monkeypatch, lambda: jobs_time_out(now=timezone.now()))

    agent_node_poll(node_id=ssh_node.pk)

    assert Job.objects.get(pk=job.pk).state == JobState.FAILED
    assert group_alive(pgid)
    assert job.allocations.get().released_at is None


@pytest.mark.django_db(transaction=True)
def test_a_cancel_committed_only_after_the_poll_read_its_jobs_keeps_the_gpu_busy(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # The cancel's transaction stamps the allocation's end before the poll starts, but
    # commits only after the poll has read the live attempts: to the poll the job was
    # live (kept running), though its end is older than the poll.
    job, pgid = _launched(ssh_node, ssh_settings, owner)
    cancelled, read = threading.Event(), threading.Event()

    def cancel_committed_late() -> None:
        try:
            with transaction.atomic():
                job_cancel(job_id=job.pk, by=owner)
                cancelled.set()
                read.wait(10)
        finally:
            connection.close()

    real_read = services.live_attempts_on_node

    def read_then_commit(*, node_id: int):  # type: ignore[no-untyped-def]
        attempts = real_read(node_id=node_id)
        read.set()
        canceller.join()
        return attempts

    canceller = threading.Thread(target=cancel_committed_late)
    canceller.start()
    assert cancelled.wait(10)
    monkeypatch.setattr(services, "live_attempts_on_node", read_then_commit)

    agent_node_poll(node_id=ssh_node.pk)

    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert group_alive(pgid)
    assert job.allocations.get().released_at is None
