"""Launching, watching and stopping `process`-runtime jobs through a real OpenSSH server."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from agents import services
from agents.selectors import live_attempts_on_node
from agents.services import (
    _stop_attempt,
    agent_launch,
    agent_logs_tail,
    agent_node_poll,
    agent_stop,
)
from agents.ssh import node_ssh
from cluster.models import Device, Node
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_cancel, job_preempt, job_submit, jobs_time_out
from scheduler.services import scheduling_round_run
from tests.agents.conftest import group_alive, started_job, wait_for


def _finish_when_exited(node: Node, job_id: int) -> Job:
    def finished() -> Job | None:
        agent_node_poll(node_id=node.pk)
        job = Job.objects.get(pk=job_id)
        return job if job.state in {JobState.SUCCEEDED, JobState.FAILED} else None

    return wait_for(finished)


def test_a_launched_job_runs_streams_its_logs_and_records_its_exit_code(ssh_node: Node) -> None:
    job = started_job(
        ssh_node,
        command=["sh", "-c", 'echo "hello from $GPULAB_JOB_ID on $CUDA_VISIBLE_DEVICES"; '
                             "echo oops >&2; read line < /dev/null; sleep 1; exit 3"],
    )  # fmt: skip

    running = agent_launch(job_id=job.pk, attempt=job.attempt)

    assert running is not None and running.state == JobState.RUNNING
    # Streamed while it still runs (it sleeps a second before exiting).
    stdout = wait_for(lambda: agent_logs_tail(job_id=job.pk, stream="stdout"))
    assert stdout == f"hello from {job.pk} on GPU-sshnode-0\n"
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    finished = _finish_when_exited(ssh_node, job.pk)
    assert finished.state == JobState.FAILED
    assert finished.exit_code == 3
    assert agent_logs_tail(job_id=job.pk, stream="stderr") == "oops\n"


def test_a_failing_job_with_a_retry_left_is_requeued_by_the_poll(ssh_node: Node) -> None:
    job = started_job(ssh_node, command=["sh", "-c", "exit 3"], max_retries=1)
    agent_launch(job_id=job.pk, attempt=job.attempt)

    def requeued() -> Job | None:
        agent_node_poll(node_id=ssh_node.pk)
        current = Job.objects.get(pk=job.pk)
        return current if current.state == JobState.PENDING else None

    retried = wait_for(requeued)
    assert (retried.retries_used, retried.exit_code) == (1, 3)
    assert retried.reason == "Exited with code 3; retry 1 of 1 after a 60 s backoff."


def test_a_job_that_exits_zero_succeeds(ssh_node: Node) -> None:
    job = started_job(ssh_node, command=["true"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    finished = _finish_when_exited(ssh_node, job.pk)
    assert (finished.state, finished.exit_code) == (JobState.SUCCEEDED, 0)


def test_a_stopped_job_gets_sigterm_and_its_grace_period_to_checkpoint(ssh_node: Node) -> None:
    job = started_job(
        ssh_node,
        command=["sh", "-c", "trap 'echo checkpointed; exit 0' TERM; echo ready; "
                             "while :; do sleep 0.1; done"],
    )  # fmt: skip
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    job_preempt(job_id=job.pk, reason="test")

    requeued = agent_stop(job_id=job.pk, attempt=job.attempt, grace_seconds=5)

    assert requeued is not None and requeued.state == JobState.PENDING
    assert requeued.preemption_count == 1
    assert agent_logs_tail(job_id=job.pk) == "ready\ncheckpointed\n"


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = started_job(
        ssh_node, command=["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"]
    )
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())
    job_preempt(job_id=job.pk, reason="test")

    requeued = agent_stop(job_id=job.pk, attempt=job.attempt, grace_seconds=1)

    assert requeued is not None and requeued.state == JobState.PENDING
    wait_for(lambda: not group_alive(pgid), timeout=5)


def test_a_command_that_cannot_start_fails_with_its_exit_code(ssh_node: Node) -> None:
    job = started_job(ssh_node, command=["/nonexistent/program", "--flag"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    finished = _finish_when_exited(ssh_node, job.pk)
    assert finished.state == JobState.FAILED
    assert finished.exit_code == 127


def test_an_attempt_of_a_cancelled_job_is_stopped_by_the_poll(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = started_job(ssh_node, command=["sleep", "60"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # as job_cancel leaves it
    from jobs.models import Allocation

    Allocation.objects.filter(job_id=job.pk).update(ended_at=job.started_at)

    counts = agent_node_poll(node_id=ssh_node.pk, grace_seconds=1)

    assert counts["stopped"] == 1
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())
    wait_for(lambda: not group_alive(pgid))


def test_a_job_past_its_walltime_fails_and_the_poll_stops_it_with_sigterm_first(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = started_job(
        ssh_node,
        command=["sh", "-c", "trap 'echo stopped; exit 0' TERM; echo ready; "
                             "while :; do sleep 0.1; done"],
        walltime_seconds=60,
    )  # fmt: skip
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())

    assert jobs_time_out(now=timezone.now() + timedelta(seconds=61)) == [job.pk]
    counts = agent_node_poll(node_id=ssh_node.pk, grace_seconds=5)

    timed_out = Job.objects.get(pk=job.pk)
    assert timed_out.state == JobState.FAILED
    assert timed_out.reason.startswith("Walltime exceeded: ran 0:01:0")
    assert counts["stopped"] == 1
    wait_for(lambda: not group_alive(pgid))
    # The job saw SIGTERM and had its grace period, as for a preemption.
    out = (ssh_settings / f"gpulab-{job.pk}-1" / "stdout").read_text()
    assert out == "ready\nstopped\n"


def test_owners_read_their_running_jobs_logs_through_the_api_and_others_cannot(
    ssh_node: Node,
    owner,
    outsider,
    api_as,  # type: ignore[no-untyped-def]
) -> None:
    job = started_job(
        ssh_node, command=["sh", "-c", "echo out; echo err >&2; sleep 30"], owner=owner
    )
    agent_launch(job_id=job.pk, attempt=job.attempt)
    url = f"/api/v1/agents/jobs/{job.pk}/logs/"
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "out\n")

    stdout = api_as(owner).get(url)
    stderr = api_as(owner).get(url, {"stream": "stderr"})

    assert stdout.status_code == 200
    assert stdout.json() == {
        "job": job.pk, "attempt": 1, "stream": "stdout", "text": "out\n", "archived": False,
    }  # fmt: skip
    assert stderr.json()["text"] == "err\n"
    assert api_as(owner).get(url, {"stream": "/etc/passwd"}).status_code == 400
    assert api_as(outsider).get(url).status_code == 404


def test_launching_the_same_attempt_twice_starts_it_once(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = started_job(ssh_node, command=["sh", "-c", "echo once; sleep 30"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    pid = (ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text()
    Job.objects.filter(pk=job.pk).update(state=JobState.STARTING)  # a redelivered task

    again = agent_launch(job_id=job.pk, attempt=job.attempt)

    assert again is not None and again.state == JobState.RUNNING
    assert (ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text() == pid
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "once\n")


def test_a_launch_delivered_twice_at_once_leaves_the_running_program_alone(
    ssh_node: Node, ssh_settings: Path, monkeypatch
) -> None:
    # Two deliveries of one launch both found the job STARTING; the other one marked it
    # RUNNING first. This one's mark then fails: it used to stop the program as unwanted.
    job = started_job(ssh_node, command=["sh", "-c", "echo once; sleep 30"])
    real_mark = services.job_mark_running

    def the_other_delivery_marks_first(**kwargs):  # type: ignore[no-untyped-def]
        real_mark(**kwargs)
        return real_mark(**kwargs)  # this delivery's own mark: an illegal transition

    monkeypatch.setattr(services, "job_mark_running", the_other_delivery_marks_first)

    result = agent_launch(job_id=job.pk, attempt=job.attempt)

    assert result is not None and result.state == JobState.RUNNING
    assert job.allocations.filter(ended_at__isnull=True).count() == job.num_gpus
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "once\n")
    assert not (ssh_settings / f"gpulab-{job.pk}-1" / "stop-sent").exists()


CHECKPOINTING = [
    "sh", "-c", "trap 'echo checkpointed; exit 0' TERM; echo ready; while :; do sleep 0.1; done"
]  # fmt: skip


def test_a_redelivered_stop_requeues_the_job_instead_of_calling_its_exit_a_success(
    ssh_node: Node,
) -> None:
    # The first stop task signalled the program (which checkpointed and exited 0), then
    # its worker died before recording the requeue; Celery delivers the stop again.
    job = started_job(ssh_node, command=CHECKPOINTING)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    job_preempt(job_id=job.pk, reason="test")
    with node_ssh(ssh_node) as session:
        first = _stop_attempt(session, job_id=job.pk, attempt=job.attempt, grace_seconds=5)
    assert (first.state, first.exit_code, first.exited_before_stop) == ("exited", 0, False)

    again = agent_stop(job_id=job.pk, attempt=job.attempt, grace_seconds=5)

    assert again is not None and again.state == JobState.PENDING
    assert again.exit_code is None


def test_a_poll_that_read_a_job_as_running_leaves_it_to_the_stop_once_it_is_preempted(
    ssh_node: Node, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    job = started_job(ssh_node, command=CHECKPOINTING)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    read_before_the_round = live_attempts_on_node(node_id=ssh_node.pk)
    assert [live.state for live in read_before_the_round] == [JobState.RUNNING]
    # A round preempts it and the stop's SIGTERM ends it, between the poll's read and its
    # status check.
    job_preempt(job_id=job.pk, reason="test")
    with node_ssh(ssh_node) as session:
        _stop_attempt(session, job_id=job.pk, attempt=job.attempt, grace_seconds=5)
    monkeypatch.setattr(
        "agents.services.live_attempts_on_node", lambda node_id: read_before_the_round
    )

    agent_node_poll(node_id=ssh_node.pk)

    assert Job.objects.get(pk=job.pk).state == JobState.PREEMPTING  # not SUCCEEDED
    requeued = agent_stop(job_id=job.pk, attempt=job.attempt, grace_seconds=5)
    assert requeued is not None and requeued.state == JobState.PENDING


def test_a_cancelled_jobs_gpu_takes_no_new_job_until_the_poll_has_stopped_it(
    ssh_node: Node, ssh_settings: Path, owner
) -> None:  # type: ignore[no-untyped-def]
    # Before, cancelling freed the GPU at once: the next round started a job on it while
    # the cancelled process still ran there until the poll (and its grace) stopped it.
    Device.objects.filter(node=ssh_node, index=1).delete()  # one GPU: both jobs want it
    job = started_job(ssh_node, command=CHECKPOINTING, owner=owner)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())
    waiting = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=1))

    job_cancel(job_id=job.pk, by=owner)
    scheduling_round_run()

    assert Job.objects.get(pk=waiting.pk).state == JobState.PENDING
    assert group_alive(pgid)

    agent_node_poll(node_id=ssh_node.pk)  # stops the cancelled attempt, then releases
    scheduling_round_run()

    assert not group_alive(pgid)
    assert Job.objects.get(pk=waiting.pk).state == JobState.STARTING


def test_a_job_cancelled_while_the_poll_runs_keeps_its_gpu_busy_until_the_next_poll(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # The poll had listed what runs on the node before the cancel: releasing every ended
    # allocation afterwards would have freed a GPU its process still held.
    job = started_job(ssh_node, command=CHECKPOINTING, owner=owner)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "ready\n")
    pgid = int((ssh_settings / f"gpulab-{job.pk}-1" / "pid").read_text())
    real_stop_stale = services._stop_stale

    def cancelled_meanwhile(session, **kwargs):  # type: ignore[no-untyped-def]
        stopped = real_stop_stale(session, **kwargs)
        job_cancel(job_id=job.pk, by=owner)
        return stopped

    monkeypatch.setattr(services, "_stop_stale", cancelled_meanwhile)
    agent_node_poll(node_id=ssh_node.pk)

    assert group_alive(pgid)
    assert job.allocations.get().released_at is None
    monkeypatch.setattr(services, "_stop_stale", real_stop_stale)
    agent_node_poll(node_id=ssh_node.pk)
    assert not group_alive(pgid)
    assert job.allocations.get().released_at is not None
