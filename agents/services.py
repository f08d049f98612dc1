"""What the control plane asks of nodes: launch, stop, poll and reconcile job attempts.

Called after the scheduling round's transaction commits. Jobs on simulated nodes (the
demo) are handled in-process by `agents.simulated`; on real nodes the requests become
Celery tasks (`agents.tasks`) that call the SSH services below, which report back only
through the job state machine (`jobs.services`).

None of these services holds a database transaction across SSH: a node that hangs for
the SSH timeout must not hold row locks the scheduler needs.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import paramiko
from django.conf import settings
from django.db import DataError, IntegrityError, transaction
from django.db.models import Exists, Max, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from accounts.models import User
from cluster.choices import NodeState, Runtime
from cluster.models import Node
from cluster.validation import BadLimitLabel, limit_label
from config.errors import ApplicationError, NotFound, ValidationFailed
from jobs.choices import JobState
from jobs.models import Allocation, Job, JobEvent
from jobs.services import (
    job_fail,
    job_finish,
    job_launch_failed,
    job_mark_lost,
    job_mark_running,
    job_requeue,
    jobs_lost_requeue,
)
from scheduler.triggers import round_request_on_commit

from . import runtimes, simulated
from .models import AttemptLog, NodeHostKey
from .selectors import (
    LAUNCH_UNDELIVERED_REASON,
    LiveAttempt,
    attempts_to_remove,
    devices_of_attempt,
    launches_undelivered,
    live_attempts_on_node,
    node_of_attempt,
)
from .ssh import CommandTimedOut, HostKeyRefused, NodeSession, NodeUnreachable, SshBudget, node_ssh
from .webhooks import node_event_notify

logger = logging.getLogger(__name__)

# Exit code recorded when an attempt's process group vanished without writing one
# (SIGKILL from outside, the OOM killer, a reboot): 128 + SIGKILL, as a shell reports it.
VANISHED_EXIT_CODE = 137
RUNNING_ONLY = frozenset({JobState.RUNNING})
# SSH time around a task's main wait (connect attempts, the small commands around it).
SSH_MARGIN_SECONDS = 300


def launch_time_limit_seconds() -> int:
    """The launch task's time limit: the longest a launch can still be under way."""
    return settings.GPULAB_LAUNCH_TIMEOUT_SECONDS + SSH_MARGIN_SECONDS


# How a launch killed by the node's own deadline (`_launch_bounded`) exits: `timeout`
# kills its whole process group with SIGKILL, itself included, so the shell reports
# 128 + 9.
LAUNCH_KILLED_EXIT = 137


def _launch_bounded(script: str, seconds: int) -> str:
    """`script` run under the node's `timeout -s KILL`: at `seconds` every process of the
    launch (`docker run` pulling an image included) is killed on the node itself.

    The worker's own deadline only closes its SSH channel, which leaves the command
    running on the node: a launch that outlived it could still start its program on GPUs
    given to the next job. With the node's deadline, a launch that ends by it is known to
    be gone. The program it started is not in that process group (the wrapper runs under
    `setsid`, a container under dockerd), and a launch that finished is not signalled.
    """
    # `; exit $?`: where /bin/sh is bash (RHEL and kin), a shell ending in a command
    # replaces itself with it, `timeout` then kills itself under sshd, which reports a
    # signal, not 137; a command after it keeps the shell there to report 128 + 9.
    bounded = shlex.join(["timeout", "-s", "KILL", str(int(seconds)), "sh", "-c", script])
    return f"{bounded}; exit $?"


# --------------------------------------------------------------------------- requests


def ssh_dispatch_enabled() -> bool:
    # Only a deployment with Celery workers can run SSH work; the demo's embedded loop
    # and the tests ("off") have none, and tests call the services directly.
    return settings.GPULAB_SCHEDULER_MODE == "celery"


def agent_launch_request(*, job_id: int, attempt: int) -> None:
    """Start an attempt the round placed: in-process for simulated nodes, else a task."""
    node = node_of_attempt(job_id=job_id, attempt=attempt)
    if node is None:
        return
    if node.simulated:
        simulated.simulated_launch(job_id=job_id)
        return
    if not ssh_dispatch_enabled():
        logger.warning(
            "Job %s attempt %s is placed on real node %s, but GPULAB_SCHEDULER_MODE=%s has "
            "no Celery worker to launch it over SSH.",
            job_id,
            attempt,
            node.name,
            settings.GPULAB_SCHEDULER_MODE,
        )
        return
    from .tasks import agent_launch_task

    agent_launch_task.delay(job_id=job_id, attempt=attempt)


def agent_stop_request(*, job_id: int, attempt: int, grace_seconds: int) -> None:
    """Stop a preempted attempt: simulated nodes requeue on their own tick."""
    node = node_of_attempt(job_id=job_id, attempt=attempt)
    if node is None or node.simulated:
        return
    if not ssh_dispatch_enabled():
        logger.warning(
            "Job %s attempt %s should stop on real node %s, but GPULAB_SCHEDULER_MODE=%s has "
            "no Celery worker to stop it over SSH.",
            job_id,
            attempt,
            node.name,
            settings.GPULAB_SCHEDULER_MODE,
        )
        return
    from .tasks import agent_stop_task

    agent_stop_task.delay(job_id=job_id, attempt=attempt, grace_seconds=grace_seconds)


# --------------------------------------------------------------------------- launch


def _per_gpu_label(node: Node, labels: dict[str, Any], name: str) -> float | None:
    """A per-GPU limit from the node's label `name`; None for no limit.

    The rule is the admin form's (`cluster.validation`). A label that breaks it (written
    before the rule, or from a shell) refuses the launch with the node and the label
    named (the job fails with that reason and its GPUs are free), rather than raising out
    of the launch task, which would leave the job STARTING for ever.
    """
    try:
        return limit_label(labels, name)
    except BadLimitLabel as exc:
        shown = repr(labels.get(name))
        shown = shown if len(shown) <= 40 else f"{shown[:39]}…"  # 400 digits say no more
        raise runtimes.LaunchRefused(
            f"Node {node.name} has a bad label {name}={shown}: it {exc}. An admin must fix "
            "the node's labels."
        ) from None


def _launch_spec(*, job: Job, node: Node) -> runtimes.LaunchSpec:
    devices = devices_of_attempt(job_id=job.pk, attempt=job.attempt)
    labels = node.labels if isinstance(node.labels, dict) else {}
    # Optional per-GPU resource limits an admin sets as node labels.
    cpus_per_gpu = _per_gpu_label(node, labels, "cpus_per_gpu")
    memory_per_gpu = _per_gpu_label(node, labels, "memory_mb_per_gpu")
    count = max(len(devices), 1)
    return runtimes.LaunchSpec(
        job_id=job.pk,
        attempt=job.attempt,
        image=job.image,
        command=list(job.command) if isinstance(job.command, list) else job.command,
        env=job.env if isinstance(job.env, dict) else {},
        device_uuids=[device.uuid for device in devices],
        run_root=settings.GPULAB_NODE_RUN_ROOT,
        cpus=cpus_per_gpu * count if cpus_per_gpu else None,
        memory_mb=int(memory_per_gpu) * count if memory_per_gpu else None,
        labels={"node": node.name},
        array=(
            (job.array_id, job.array_index, job.array.size)
            if job.array_id is not None and job.array_index is not None
            else None
        ),
        session=(
            (job.session_port, job.session_token)
            if job.interactive and job.session_port is not None
            else None
        ),
    )


def _launch_script(spec: runtimes.LaunchSpec, runtime: str) -> str:
    if runtime == Runtime.DOCKER:
        return runtimes.docker_launch_script(spec)
    return runtimes.wrapped_launch_script(spec, runtime)


def agent_launch(*, job_id: int, attempt: int) -> Job | None:
    """Start attempt `attempt` of a STARTING job on its node over SSH.

    1. Skip quietly if the job moved on (cancelled, or a newer attempt exists).
    2. Build the runtime's command; a job that cannot be launched as stored (bad image,
       hostile argv) fails with the reason, without touching the node.
    3. Run it, bounded by GPULAB_LAUNCH_TIMEOUT_SECONDS on the node (`_launch_bounded`).
       Success → RUNNING. The command failing on the node → FAILED with its stderr. One
       the node killed at its deadline (a slow image pull) → FAILED too: the node
       answered, so it is this job's failure, not the node's (`_launch_timed_out`). Node
       trouble (host key, unreachable, not even the deadline reported) raises for the
       caller (the task retries NodeUnreachable and finally calls `agent_launch_gave_up`).
    4. A job cancelled (or timed out) while its launch was under way: its attempt is
       stopped at once and its GPUs released (`_attempt_end_unwanted`), here and not by
       the poll, which leaves such GPUs alone while a launch may still start the program
       (see `_release_stopped`).
    """
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.state != JobState.STARTING or job.attempt != attempt:
        logger.info("Launch of job %s attempt %s skipped: the job moved on.", job_id, attempt)
        if job is not None and _unreleased(job_id=job_id, attempt=attempt).exists():
            # An earlier try of this task may have started it before losing the node's
            # answer: only a stop makes the GPUs safe to release.
            _attempt_end_unwanted(job_id=job_id, attempt=attempt)
        return None
    node = node_of_attempt(job_id=job_id, attempt=attempt)
    if node is None:
        return None
    try:
        script = _launch_script(_launch_spec(job=job, node=node), node.runtime)
    except runtimes.LaunchRefused as exc:
        try:
            return job_launch_failed(job_id=job_id, message=str(exc), attempt=attempt)
        except ApplicationError as moved:
            # Nothing reached the node: there is nothing to stop.
            logger.info(
                "Launch of job %s attempt %s refused after it moved on: %s", job_id, attempt, moved
            )
            return None
    # `docker run` may pull the image first: minutes, not the usual command timeout.
    limit = settings.GPULAB_LAUNCH_TIMEOUT_SECONDS
    try:
        with node_ssh(node) as session:
            began = time.monotonic()
            # The worker waits one step timeout longer than the node's deadline, for the
            # node to report the kill.
            result = session.run(_launch_bounded(script, limit), timeout=limit + session.timeout)
            ran = time.monotonic() - began
    except CommandTimedOut as exc:
        # Not even the node's own deadline was reported: the node (or the network to it)
        # is in trouble, not the job. The task retries, and at last takes the node down.
        logger.warning("Launch of job %s attempt %s got no answer: %s", job_id, attempt, exc)
        raise
    # The node's `timeout` starts after `began`: a kill it made is never read as sooner.
    if result.exit_status == LAUNCH_KILLED_EXIT and ran >= limit:
        return _launch_timed_out(job_id=job_id, attempt=attempt, node=node)
    if result.exit_status != 0:
        detail = (result.stderr or result.stdout).strip()[-400:]
        try:
            # Pinned to this attempt: while the launch ran, the job may have been requeued
            # (its node taken down) and placed again; that attempt is not this one's to fail.
            return job_launch_failed(
                job_id=job_id,
                message=f"Launch on {node.name} failed (exit {result.exit_status}): {detail}",
                attempt=attempt,
            )
        except ApplicationError as exc:
            logger.info(
                "Job %s attempt %s failed to launch on %s but the job moved on meanwhile: %s",
                job_id,
                attempt,
                node.name,
                exc,
            )
            _attempt_end_unwanted(job_id=job_id, attempt=attempt)
            return None
    handle = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "?"
    name = runtimes.attempt_name(job_id, attempt)
    try:
        # Pinned to this attempt, like the failure above: a newer attempt placed on another
        # node must not be marked running by this one's program (its own launch would then
        # skip it, and the program here would hold GPUs nothing accounts for).
        return job_mark_running(
            job_id=job_id,
            message=f"Running on {node.name} ({node.runtime} {name}, pid/id {handle[:12]}).",
            attempt=attempt,
        )
    except ApplicationError as exc:
        running = Job.objects.filter(pk=job_id, attempt=attempt, state=JobState.RUNNING).first()
        if running is not None:
            # A second delivery of this launch raced the first: the node's launch script is
            # idempotent (one program per attempt), and the other delivery marked it running.
            logger.info("Job %s attempt %s was already marked running.", job_id, attempt)
            return running
        logger.info(
            "Job %s attempt %s started on %s but the job moved on meanwhile; stopping it: %s",
            job_id,
            attempt,
            node.name,
            exc,
        )
        _attempt_end_unwanted(job_id=job_id, attempt=attempt)
        return None


def _unreleased(*, job_id: int, attempt: int) -> QuerySet[Allocation]:
    """The attempt's allocations it let go of, on GPUs its process may still be using."""
    return Allocation.objects.filter(
        job_id=job_id, attempt=attempt, ended_at__isnull=False, released_at__isnull=True
    )


def _launch_timed_out(*, job_id: int, attempt: int, node: Node) -> Job | None:
    """The node's deadline killed a launch (GPULAB_LAUNCH_TIMEOUT_SECONDS): its job fails,
    its node stays up.

    The node answered and reported the kill, so neither the node nor the other jobs on it
    are to blame, and the job is not retried (a failed launch never is). What the launch
    may have started just before its end is stopped at once, then its GPUs released.
    """
    limit = settings.GPULAB_LAUNCH_TIMEOUT_SECONDS
    message = (
        f"Launch on {node.name} did not finish within {limit} s: pulling a large image may "
        "take longer (an admin can raise GPULAB_LAUNCH_TIMEOUT_SECONDS)."
    )
    failed: Job | None = None
    try:
        failed = job_fail(
            job_id=job_id,
            message=message,
            expected=frozenset({JobState.STARTING}),
            attempt=attempt,
            process_gone=False,  # released below, once stopped
        )
    except ApplicationError as exc:
        # Cancelled or timed out meanwhile: its GPUs are held all the same.
        logger.info("Job %s timed out launching but moved on meanwhile: %s", job_id, exc)
    _attempt_end_unwanted(job_id=job_id, attempt=attempt)
    return failed


def _attempt_end_unwanted(*, job_id: int, attempt: int) -> None:
    """Stop an attempt whose job moved on during its launch (or whose launch the node
    killed at its deadline); then release its GPUs.

    No grace: the program has only just started and its job is over. Node trouble is
    logged, not raised: the GPUs then stay held, and the poll stops the attempt and
    releases them once no launch can be under way any more.
    """
    node = node_of_attempt(job_id=job_id, attempt=attempt)
    if node is None:
        return
    try:
        with node_ssh(node) as session:
            status = _stop_attempt(session, job_id=job_id, attempt=attempt, grace_seconds=0)
    except ApplicationError as exc:
        logger.warning("Job %s attempt %s could not be stopped: %s", job_id, attempt, exc)
        return
    if status.state in {"running", "unreadable"}:
        # Still there, or docker could not say: not known to be gone, so not released.
        logger.warning("Job %s attempt %s may still run after its stop.", job_id, attempt)
        return
    released = _unreleased(job_id=job_id, attempt=attempt).update(released_at=timezone.now())
    if released:
        round_request_on_commit()  # the job waiting for these GPUs need not wait a poll


def agent_launch_gave_up(*, job_id: int, attempt: int, error: ApplicationError) -> None:
    """The node could not be reached to launch: the job is LOST and requeued.

    It is the node's fault, not the job's, so no retry is charged; the node leaves the
    pool (DOWN) so the next round does not place the job there again. Every user can
    read a node's reason, so it says only what kind of trouble it was; the SSH error
    itself (addresses, users, key paths) goes to the log.
    """
    _gave_up(job_id=job_id, attempt=attempt, error=error, state=JobState.STARTING, what="Launch")


def _ssh_trouble_reason(error: ApplicationError) -> str:
    """A node's reason for SSH trouble, for every user to read: the kind of trouble
    only, never the error's text (addresses, users, key paths)."""
    if isinstance(error, HostKeyRefused):
        return "Host key not approved for SSH; an admin must review it."
    if isinstance(error, CommandTimedOut):
        return "A command over SSH did not finish in time."
    return "Unreachable over SSH."


def agent_stop_gave_up(*, job_id: int, attempt: int, error: ApplicationError) -> None:
    """A preempted attempt could not be stopped over SSH (host key refused, or the node
    unreachable through every retry): its node goes DOWN and its jobs are requeued.

    Otherwise the job would stay PREEMPTING, holding its GPUs, for as long as the node's
    agent keeps sending heartbeats (which keep the liveness sweep away), and the job that
    preempted it would wait for ever; the overdue sweep would only re-send the same stop.
    As in Slurm, a node where a job cannot be killed leaves the pool. Back after its next
    heartbeat, once the return reconcile reaches it over SSH and stops what still runs.
    """
    _gave_up(job_id=job_id, attempt=attempt, error=error, state=JobState.PREEMPTING, what="Stop")


def _gave_up(
    *, job_id: int, attempt: int, error: ApplicationError, state: JobState, what: str
) -> None:
    """A launch or stop gave up over SSH: the node goes DOWN, its jobs requeued; or, if
    the job is no longer in `state` at this attempt (another delivery got through, or the
    job moved on), nothing: the node answered after all, and taking it down would requeue
    healthy jobs."""
    if not Job.objects.filter(pk=job_id, attempt=attempt, state=state).exists():
        logger.info("%s of job %s attempt %s gave up after it moved on.", what, job_id, attempt)
        return
    reason = _ssh_trouble_reason(error)
    logger.warning("%s of job %s attempt %s gave up: %s", what, job_id, attempt, error.message)
    node = node_of_attempt(job_id=job_id, attempt=attempt)
    if node is None:
        _lose_and_requeue(job_id=job_id, attempt=attempt, message=f"{what} failed: {reason}")
        return
    # Back after its next heartbeat, once the return reconcile reaches it over SSH.
    _node_take_down(node=node, reason=reason, expected=[node.state])


# --------------------------------------------------------------------------- stop, status


@dataclass(frozen=True)
class AttemptStatus:
    state: str  # "running", "exited", "vanished", "unknown"
    exit_code: int | None = None
    exited_before_stop: bool = False


def _parse_status(output: str) -> AttemptStatus:
    lines = output.strip().splitlines()
    before = "was-exited" in lines
    words = lines[-1].split() if lines else ["unknown"]
    if words[0] == "exited" and len(words) > 1 and words[1].lstrip("-").isdigit():
        return AttemptStatus("exited", int(words[1]), before)
    if words[0] in {"running", "vanished"}:
        return AttemptStatus(words[0], None, before)
    return AttemptStatus("unknown", None, before)


def _parse_docker_status(result_stdout: str, exit_status: int, stderr: str = "") -> AttemptStatus:
    words = result_stdout.split()
    if exit_status != 0:
        # Only "no such container" means the node does not know the attempt; any other
        # failure (the daemon restarting, a full disk) says nothing about the job, and
        # reading it as "unknown" would requeue every job on the node.
        return AttemptStatus("unknown" if "no such" in stderr.lower() else "unreadable")
    if len(words) != 2:
        return AttemptStatus("unreadable")
    if words[0] in {"exited", "dead"} and words[1].lstrip("-").isdigit():
        return AttemptStatus("exited", int(words[1]))
    if words[0] == "created" and words[1].lstrip("-").isdigit() and int(words[1]) != 0:
        # Docker could not start it (OCI create failed: 127, 126...): it never ran and
        # never will, though docker still lists it as created.
        return AttemptStatus("exited", int(words[1]))
    return AttemptStatus("running")


def _run_dir(job_id: int, attempt: int) -> str:
    return f"{settings.GPULAB_NODE_RUN_ROOT.rstrip('/')}/{runtimes.attempt_name(job_id, attempt)}"


def _attempt_status(session: NodeSession, *, job_id: int, attempt: int) -> AttemptStatus:
    if session.node.runtime == Runtime.DOCKER:
        argv = runtimes.docker_status_argv(runtimes.attempt_name(job_id, attempt))
        result = session.run(shlex.join(argv))
        return _parse_docker_status(result.stdout, result.exit_status, result.stderr)
    result = session.run(runtimes.wrapped_status_script(_run_dir(job_id, attempt)))
    return _parse_status(result.stdout)


def _stop_attempt(
    session: NodeSession, *, job_id: int, attempt: int, grace_seconds: int
) -> AttemptStatus:
    """SIGTERM, up to `grace_seconds` to checkpoint, then SIGKILL; the status afterwards.

    `exited_before_stop` only when no earlier stop was sent: a redelivered stop finds the
    exit the first one caused, which is a preemption, not the program ending by itself.
    """
    timeout = grace_seconds + session.timeout
    if session.node.runtime == Runtime.DOCKER:
        name = runtimes.attempt_name(job_id, attempt)
        before = _attempt_status(session, job_id=job_id, attempt=attempt)
        marker = runtimes.stop_marker_script(_run_dir(job_id, attempt))
        first_stop = "first-stop" in session.run(marker).stdout
        session.run(shlex.join(runtimes.docker_stop_argv(name, grace_seconds)), timeout=timeout)
        after = _attempt_status(session, job_id=job_id, attempt=attempt)
        return AttemptStatus(after.state, after.exit_code, first_stop and before.state == "exited")
    script = runtimes.wrapped_stop_script(_run_dir(job_id, attempt), grace_seconds)
    return _parse_status(session.run(script, timeout=timeout).stdout)


def agent_stop(*, job_id: int, attempt: int, grace_seconds: int) -> Job | None:
    """Stop a PREEMPTING attempt and requeue the job (or record its exit, if it had
    already ended by itself before the signal: PREEMPTING → SUCCEEDED | FAILED).

    An attempt the node still reports running after the SIGKILL (a process stuck in the
    kernel), or whose state docker could not read, is requeued all the same (its job
    must not hold up the one that preempted it), but its GPUs stay busy until the node
    poll, which finds it stale, has stopped it (`_release_stopped`).
    """
    node = node_of_attempt(job_id=job_id, attempt=attempt)
    if node is None:
        return None
    with node_ssh(node) as session:
        status = _stop_attempt(session, job_id=job_id, attempt=attempt, grace_seconds=grace_seconds)
    job = Job.objects.filter(pk=job_id, attempt=attempt, state=JobState.PREEMPTING).first()
    if job is None:
        return None  # cancelled or already handled; the process is stopped either way
    if status.exited_before_stop and status.exit_code is not None:
        return job_finish(job_id=job_id, exit_code=status.exit_code, attempt=attempt)
    return job_requeue(
        job_id=job_id,
        message=f"Stopped on {node.name} after preemption; requeued.",
        attempt=attempt,
        process_gone=status.state not in {"running", "unreadable"},
    )


def agent_node_poll(*, node_id: int, grace_seconds: int = 10) -> dict[str, int]:
    """Check every attempt a node should be running, and stop those it should not.

    1. A RUNNING attempt that exited → SUCCEEDED/FAILED with its exit code; one whose
       process vanished without a code → FAILED (137); one the node does not know at
       all → LOST and requeued.
    2. Attempts alive on the node that are not a live attempt there (cancelled jobs,
       stale attempts from before the node went down) are stopped.
    Returns counts by what happened.
    """
    node = Node.objects.get(pk=node_id)
    counts = {"finished": 0, "lost": 0, "stopped": 0}
    # Before `expected` is read: an attempt ended after this moment may be in it, so kept
    # running by `_stop_stale` below, and must not be released (`_release_stopped`).
    read_at = timezone.now()
    expected = live_attempts_on_node(node_id=node_id)
    with node_ssh(node) as session:
        for live in expected:
            if live.state != JobState.RUNNING:
                continue  # STARTING: the launch task owns it; PREEMPTING: the stop task
            status = _attempt_status(session, job_id=live.job_id, attempt=live.attempt)
            try:
                # Only a job still RUNNING at this attempt: a round may have preempted it
                # since `expected` was read, and then its exit after SIGTERM is the stop
                # task's to judge (a checkpointed exit 0 is not a success).
                if status.state == "exited" and status.exit_code is not None:
                    job_finish(
                        job_id=live.job_id,
                        exit_code=status.exit_code,
                        attempt=live.attempt,
                        expected=RUNNING_ONLY,
                    )
                    counts["finished"] += 1
                elif status.state == "vanished":
                    job_finish(
                        job_id=live.job_id,
                        exit_code=VANISHED_EXIT_CODE,
                        message=f"The process on {node.name} was killed without an exit status.",
                        attempt=live.attempt,
                        expected=RUNNING_ONLY,
                    )
                    counts["finished"] += 1
                elif status.state == "unknown":
                    _lose_and_requeue(
                        job_id=live.job_id,
                        attempt=live.attempt,
                        message=f"Node {node.name} does not know this attempt.",
                    )
                    counts["lost"] += 1
                elif status.state == "unreadable":
                    logger.warning(
                        "Status of job %s attempt %s on %s could not be read; left alone.",
                        live.job_id,
                        live.attempt,
                        node.name,
                    )
            except ApplicationError as exc:
                logger.info("Poll left job %s alone: %s", live.job_id, exc)
        stale = _stop_stale(session, keep=expected, grace_seconds=grace_seconds)
    counts["stopped"] = len(stale.stopped)
    if stale.listed:
        _release_stopped(
            node_id=node_id, ended_before=read_at, kept=expected, still=stale.still_running
        )
    else:
        # What runs there is unknown (docker did not answer): nothing is released.
        logger.warning("Node %s could not list what runs on it; no GPU released.", node.name)
    return counts


def _release_stopped(
    *,
    node_id: int,
    ended_before: datetime,
    kept: list[LiveAttempt],
    still: set[tuple[int, int]],
) -> None:
    """Attempts that had ended here before `kept` was read (the attempts `_stop_stale`
    left running, read at `ended_before`) are stopped now: it stopped every other one it
    found running. Their devices may take new jobs.

    One ended after that read may have been read as live, so left running, and waits for
    the next poll: a cancel or a walltime timeout landing during the poll's status checks.
    So does every attempt in `kept`, whatever its timestamps say: one whose end was
    committed only after the read was still live to it; and every attempt in `still`,
    which the node listed as running after the stop (a process stuck in the kernel).

    Also left held: an attempt that never reached RUNNING, while its launch may still be
    under way (placed less than the launch task's time limit ago). Cancelled during the
    launch, it was not running when listed, but the launch may start it a moment later;
    the launch then stops it and releases the GPUs itself (`_attempt_end_unwanted`).
    """
    now = timezone.now()
    reached_running = JobEvent.objects.filter(
        job_id=OuterRef("job_id"),
        to_state=JobState.RUNNING,
        created_at__gte=OuterRef("started_at"),
    )
    launch_may_run = Q(
        started_at__gt=now - timedelta(seconds=launch_time_limit_seconds())
    ) & ~Exists(reached_running)
    releasable = Allocation.objects.filter(
        device__node_id=node_id,
        ended_at__lt=ended_before,
        released_at__isnull=True,
    ).exclude(launch_may_run)
    held = {(live.job_id, live.attempt) for live in kept} | still
    for job_id, attempt in held:
        releasable = releasable.exclude(job_id=job_id, attempt=attempt)
    releasable.update(released_at=now)


def _running_on_node(session: NodeSession) -> list[tuple[int, int]] | None:
    """The attempts running on the node; None where it cannot say (docker not answering:
    an empty list would read as "nothing runs", and free GPUs still in use)."""
    if session.node.runtime == Runtime.DOCKER:
        result = session.run(shlex.join(runtimes.docker_list_argv()))
    else:
        result = session.run(runtimes.wrapped_list_script(settings.GPULAB_NODE_RUN_ROOT))
    if result.exit_status != 0:
        return None
    if session.node.runtime == Runtime.DOCKER:
        names = result.stdout.split()
    else:
        names = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    return [parsed for name in names if (parsed := runtimes.parse_attempt_name(name))]


@dataclass(frozen=True)
class StaleStop:
    """What `_stop_stale` did, and what the node listed as still running afterwards."""

    stopped: list[tuple[int, int]]
    listed: bool  # False: the node could not say what runs there
    still_running: set[tuple[int, int]]


def _stop_stale(session: NodeSession, *, keep: list[LiveAttempt], grace_seconds: int) -> StaleStop:
    """Stop every attempt running on the node that is not in `keep`, all at once: one
    grace period for all of them, so n stale attempts fit the poll's time limit. Then
    list again: a stop does not always take (a process in uninterruptible sleep)."""
    wanted = {(live.job_id, live.attempt) for live in keep}
    running = _running_on_node(session)
    if running is None:
        return StaleStop([], listed=False, still_running=set())
    stale = [pair for pair in running if pair not in wanted]
    if not stale:
        return StaleStop([], listed=True, still_running=set())
    for job_id, attempt in stale:
        logger.warning(
            "Stopping stale attempt %s of job %s on %s.", attempt, job_id, session.node.name
        )
    timeout = grace_seconds + session.timeout
    if session.node.runtime == Runtime.DOCKER:
        markers = "; ".join(runtimes.stop_marker_script(_run_dir(*pair)) for pair in stale)
        session.run(markers)
        names = [runtimes.attempt_name(*pair) for pair in stale]
        session.run(
            shlex.join(runtimes.docker_stop_all_argv(names, grace_seconds)), timeout=timeout
        )
    else:
        run_dirs = [_run_dir(*pair) for pair in stale]
        session.run(runtimes.wrapped_stop_all_script(run_dirs, grace_seconds), timeout=timeout)
    after = _running_on_node(session)
    if after is None:
        return StaleStop(stale, listed=False, still_running=set())
    still = set(after) & set(stale)
    for job_id, attempt in sorted(still):
        logger.warning(
            "Stale attempt %s of job %s on %s still runs after its stop; its GPUs stay busy.",
            attempt,
            job_id,
            session.node.name,
        )
    return StaleStop(stale, listed=True, still_running=still)


# At most this many attempts are removed per node and run: one command line stays short,
# and a node that kept months of attempts before an upgrade is cleared over a few hours.
PRUNE_BATCH = 500
# The listing and the removal may each take this long: thousands of run directories to
# list, up to PRUNE_BATCH containers with their layers to delete. Within the task's limit.
PRUNE_COMMAND_SECONDS = 120
# Copying the logs of what it removes (those `agents.node_logs_archive` missed) begins no
# copy after this long; the rest stay on the node until a later run.
PRUNE_COPY_SECONDS = 60
# The listing, the copies (the last one may take ARCHIVE_COMMAND_SECONDS), the removal and
# the SSH connect's attempts.
PRUNE_TIME_LIMIT_SECONDS = 2 * PRUNE_COMMAND_SECONDS + PRUNE_COPY_SECONDS + 30 + 120


def agent_node_prune(*, node_id: int, now: datetime | None = None) -> list[tuple[int, int]]:
    """Remove the containers and run directories (logs included) of attempts that ended
    more than GPULAB_FINISHED_ATTEMPT_KEEP_DAYS ago, as Kubernetes removes a finished
    Job's pods after `ttlSecondsAfterFinished`: Docker keeps every exited container and
    its writable layer, and a busy node's disk fills with them. Returns what it removed.
    """
    keep_days = settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS
    if keep_days == 0:
        return []
    node = Node.objects.get(pk=node_id)
    ended_before = (now or timezone.now()) - timedelta(days=keep_days)
    docker = node.runtime == Runtime.DOCKER
    run_root = settings.GPULAB_NODE_RUN_ROOT
    with node_ssh(node) as session:
        listing = runtimes.kept_attempts_script(run_root, docker=docker)
        listed = session.run(listing, timeout=PRUNE_COMMAND_SECONDS).stdout
        kept = {parsed for name in listed.split() if (parsed := runtimes.parse_attempt_name(name))}
        removable = attempts_to_remove(node_id=node_id, kept=kept, ended_before=ended_before)
        removable = removable[:PRUNE_BATCH]
        # Never remove a log that was not copied: one whose copy fails stays on the node
        # until a later run copies it.
        to_copy = _not_archived(removable)
        copied = _attempt_logs_archive(session, to_copy, seconds=PRUNE_COPY_SECONDS)
        not_copied = set(to_copy) - copied
        removable = [pair for pair in removable if pair not in not_copied]
        if removable:
            names = [runtimes.attempt_name(*pair) for pair in removable]
            removal = runtimes.remove_attempts_script(run_root, names, docker=docker)
            session.run(removal, timeout=PRUNE_COMMAND_SECONDS)
            logger.info("Removed %d finished attempts from %s.", len(removable), node.name)
    return removable


# What one copy of a stream may take: LOG_TAIL_BYTES at most, read from a file or
# `docker logs`.
ARCHIVE_COMMAND_SECONDS = 30
# A run of `agent_node_logs_archive` begins no copy after this long; what is left waits
# for the next run, a minute later. Its task's limit adds the last copy's two commands
# and the SSH connect's attempts (3 × 10 s by default), with room for slower settings.
ARCHIVE_SECONDS = 45
ARCHIVE_TIME_LIMIT_SECONDS = ARCHIVE_SECONDS + 2 * ARCHIVE_COMMAND_SECONDS + 135


def agent_node_logs_archive(*, node_id: int, attempts: Sequence[Sequence[int]]) -> int:
    """Copy the log tails of ended attempts that ran on this node into the database
    (`AttemptLog`), so their pages show them without SSH, after the node removed them
    and while it is down. Attempts copied already are skipped. Returns how many it copied.
    """
    pending = _not_archived([(int(job_id), int(attempt)) for job_id, attempt in attempts])
    if not pending:
        return 0
    node = Node.objects.get(pk=node_id)
    with node_ssh(node) as session:
        return len(_attempt_logs_archive(session, pending, seconds=ARCHIVE_SECONDS))


def _not_archived(attempts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Of these attempts, those of existing jobs that have no copied log yet."""
    if not attempts:
        return []
    job_ids = {job_id for job_id, _ in attempts}
    existing = set(Job.objects.filter(pk__in=job_ids).values_list("pk", flat=True))
    done = set(AttemptLog.objects.filter(job_id__in=job_ids).values_list("job_id", "attempt"))
    return [pair for pair in attempts if pair[0] in existing and pair not in done]


def _attempt_logs_archive(
    session: NodeSession, attempts: list[tuple[int, int]], *, seconds: float
) -> set[tuple[int, int]]:
    """Copy each attempt's stdout and stderr tails (LOG_TAIL_BYTES each) into AttemptLog;
    returns the attempts copied. One the node no longer has is recorded as not found.
    A stream the node could not read leaves its attempt for a later try, and so does
    every attempt not begun within `seconds` (a slow node must not outlast the task)."""
    docker = session.node.runtime == Runtime.DOCKER
    copied: set[tuple[int, int]] = set()
    deadline = time.monotonic() + seconds
    for job_id, attempt in attempts:
        if time.monotonic() > deadline:
            break
        streams: dict[str, str] = {}
        found = True
        for stream in runtimes.LOG_STREAMS:
            script = runtimes.archived_logs_script(
                name=runtimes.attempt_name(job_id, attempt),
                run_dir=_run_dir(job_id, attempt),
                stream=stream,
                max_bytes=runtimes.LOG_TAIL_BYTES,
                docker=docker,
            )
            result = session.run(script, timeout=ARCHIVE_COMMAND_SECONDS)
            if result.exit_status == runtimes.ATTEMPT_NOT_ON_NODE:
                found, streams = False, {}
                break
            if result.exit_status != 0:
                logger.warning(
                    "Log of job %s attempt %s on %s not copied: %s",
                    job_id,
                    attempt,
                    session.node.name,
                    result.stderr.strip()[-300:],
                )
                break
            # PostgreSQL's text refuses NUL, which a job's binary output may hold: shown as
            # the replacement character, one byte, as an undecodable byte already is.
            streams[stream] = result.stdout.replace("\x00", "\ufffd")
        if found and len(streams) < len(runtimes.LOG_STREAMS):
            continue  # a stream failed: tried again later
        if not found and not _attempt_ran(job_id, attempt):
            # Its launch failed before the node made anything (a bad image, a refused
            # label): no log was lost, the job's reason says what happened.
            found = True
        try:
            with transaction.atomic():
                AttemptLog.objects.get_or_create(
                    job_id=job_id,
                    attempt=attempt,
                    defaults={
                        "stdout": streams.get("stdout", ""),
                        "stderr": streams.get("stderr", ""),
                        "found": found,
                        "archived_at": timezone.now(),
                    },
                )
        except IntegrityError:
            continue  # the job was deleted meanwhile
        except (DataError, ValueError) as exc:
            # Text the database still refuses: this attempt stays on the node, the others
            # of the batch are copied (and cleaned up) all the same.
            logger.warning("Log of job %s attempt %s not kept: %s", job_id, attempt, exc)
            continue
        copied.add((job_id, attempt))
    return copied


def _attempt_ran(job_id: int, attempt: int) -> bool:
    """Whether the attempt reached RUNNING: its job's RUNNING event lies within the span
    its devices were held."""
    span = Allocation.objects.filter(job_id=job_id, attempt=attempt).aggregate(
        began=Min("started_at"), ended=Max("ended_at")
    )
    if span["began"] is None:
        return False
    events = JobEvent.objects.filter(
        job_id=job_id, to_state=JobState.RUNNING, created_at__gte=span["began"]
    )
    if span["ended"] is not None:
        events = events.filter(created_at__lte=span["ended"])
    return events.exists()


def agent_logs_tail(
    *, job_id: int, stream: str = "stdout", max_bytes: int = 65536, budget: SshBudget | None = None
) -> str:
    """The last `max_bytes` of the current attempt's stdout or stderr, read on the node.

    `budget`: SSH connect attempts and step timeout (a web request's read passes a short
    one; default: the settings')."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.attempt == 0:
        raise NotFound(f"Job {job_id} has not started, so it has no logs.")
    node = node_of_attempt(job_id=job_id, attempt=job.attempt)
    if node is None or node.simulated:
        return ""
    with node_ssh(node, budget=budget) as session:
        if node.runtime == Runtime.DOCKER:
            name = runtimes.attempt_name(job_id, job.attempt)
            script = runtimes.docker_logs_script(name, stream, max_lines=2000, max_bytes=max_bytes)
            return session.run(script).stdout
        script = runtimes.wrapped_logs_script(_run_dir(job_id, job.attempt), stream, max_bytes)
        return session.run(script).stdout


# --------------------------------------------------------------------------- bootstrap

AGENT_SOURCE = Path(__file__).resolve().parent / "node_agent"
AGENT_FILES = ("__init__.py", "__main__.py", "collector.py", "simnvml.py")
# The longest the bootstrap waits for the new agent's first heartbeat: the agent gives a
# request 5 s, so this is reading the GPUs and a slow control plane, with room to spare.
AGENT_CHECK_SECONDS = 30


def control_plane_url_check(url: str) -> str:
    """`url` if an agent can post heartbeats to it: http(s)://host[:port][/path].

    The agent appends the heartbeat path to it, so no query or fragment; no user or
    password either (the agent's command line, with the URL, is readable in `ps`).
    """
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0  # .port raises on a bad one
    except ValueError:
        parts, port_ok = None, False
    if (
        parts is None
        or not port_ok
        or parts.scheme not in {"http", "https"}
        or not parts.hostname
        or parts.query
        or parts.fragment
        or parts.username is not None
        or any(char.isspace() or not char.isprintable() for char in url)
    ):
        raise ValidationFailed(
            {
                "control_plane_url": [
                    f"{url!r} is not http(s)://host[:port][/path]: give the control plane "
                    "as the node reaches it."
                ]
            }
        )
    return url


def node_agent_bootstrap(
    *,
    node_id: int,
    control_plane_url: str,
    python: str = "python3",
    extra_args: tuple[str, ...] = (),
    progress: Callable[[str], object] | None = None,
) -> str:
    """Install and (re)start the node agent on a node over SSH; returns its pid there.

    1. The URL is checked (`control_plane_url_check`), then a fresh agent token is made.
       Older ones are revoked only once the new agent runs (so a stale agent stops
       counting).
    2. The agent's files and the new token (`token.new`, mode 600) are copied over SFTP
       into GPULAB_NODE_AGENT_DIR; the agent needs only Python and, on GPU nodes, pynvml.
    3. The agent is run once (`--once`, at most AGENT_CHECK_SECONDS) with the new token:
       it exits 0 only when the control plane took its heartbeat (200), so the URL and
       the token are known to work before anything running is touched. An agent with a
       wrong URL does not die: it retries for ever, and the node would go DOWN five
       minutes after its working agent was replaced.
    4. The new agent is started, detached. Only once it is still alive a second later is
       the running one (agent.pid) stopped and the token and log moved into place.
    Any failure before step 4 starts the agent, or the new agent dying at once, fails the
    bootstrap (AgentDidNotStart) with its token revoked; the running agent goes on
    reporting with its own. If the SSH session fails during step 4, it cannot be known
    whether the new agent runs: its token is kept, older ones too.
    For a permanent install, run the same command line from a systemd unit instead.
    """
    from .heartbeats import (  # heartbeats imports this module
        node_agent_token_create,
        node_agent_tokens_replaced,
        node_agent_tokens_revoke,
    )

    control_plane_url_check(control_plane_url)
    node = Node.objects.get(pk=node_id)
    argv = [
        python,
        "-m",
        "node_agent",
        "--url",
        control_plane_url,
        "--token-file",
        "token.new",
        *extra_args,
    ]
    token, key = node_agent_token_create(node_id=node.pk, revoke_others=False)
    may_run = False
    try:
        with node_ssh(node) as session:
            _agent_install(session, key=key)
            if progress is not None:
                progress(
                    f"Checking that an agent on {node.name} gets a heartbeat through to "
                    f"{control_plane_url} (at most {AGENT_CHECK_SECONDS} s)..."
                )
            _agent_first_heartbeat(session, argv=argv, control_plane_url=control_plane_url)
            may_run = True  # from here on the new agent may be running
            pid = _agent_start(session, argv=argv)
    except AgentDidNotStart:
        node_agent_tokens_revoke(token_ids=[token.pk])
        raise
    except BaseException:
        if not may_run:
            node_agent_tokens_revoke(token_ids=[token.pk])
        raise
    node_agent_tokens_replaced(token=token)
    return pid


class AgentDidNotStart(ApplicationError):
    """The new agent was not started, or could not report; the running one, if any, was
    left alone with its token."""


def _agent_dir() -> str:
    return settings.GPULAB_NODE_AGENT_DIR.rstrip("/")


def _agent_install(session: NodeSession, *, key: str) -> None:
    """Copy the agent and its new token (`token.new`) into the agent directory."""
    agent_dir = _agent_dir()
    quoted = shlex.quote(agent_dir)
    where = f"{session.node.name}:{agent_dir} (GPULAB_NODE_AGENT_DIR)"
    made = session.run(f"mkdir -p {quoted}/node_agent && chmod 700 {quoted}")
    if made.exit_status != 0:
        raise AgentDidNotStart(
            f"The agent did not start: {where} could not be created: "
            f"{(made.stderr or made.stdout).strip()[-300:]}"
        )
    try:
        sftp = session.client.open_sftp()
        try:
            for name in AGENT_FILES:
                sftp.put(str(AGENT_SOURCE / name), f"{agent_dir}/node_agent/{name}")
            with sftp.open(f"{agent_dir}/token.new", "w") as token_file:
                sftp.chmod(f"{agent_dir}/token.new", 0o600)  # before the key is in it
                token_file.write(key)
        finally:
            sftp.close()
    except (OSError, paramiko.SSHException) as exc:
        raise AgentDidNotStart(
            f"The agent did not start: it could not be copied to {where}: {exc}"
        ) from exc


def _agent_first_heartbeat(
    session: NodeSession, *, argv: list[str], control_plane_url: str
) -> None:
    """Run the agent once with the new token: AgentDidNotStart unless its heartbeat got
    through (the agent exits 0 only on a 200). `timeout` bounds it on the node, so no
    check outlives the bootstrap; a failed check takes the new token's file away."""
    quoted = shlex.quote(_agent_dir())
    once = shlex.join(["timeout", str(AGENT_CHECK_SECONDS), *argv, "--once"])
    result = session.run(
        f"cd {quoted} && {once} < /dev/null 2>&1 || {{ status=$?; rm -f token.new; "
        "exit $status; }",
        timeout=AGENT_CHECK_SECONDS + session.timeout,
    )
    if result.exit_status == 0:
        return
    if result.exit_status == 124:
        why = f"no heartbeat got through within {AGENT_CHECK_SECONDS} s"
    else:
        why = f"its heartbeat did not get through (exit {result.exit_status})"
    detail = (result.stdout + result.stderr).strip()[-400:]
    raise AgentDidNotStart(
        f"The agent on {session.node.name} did not start: {why} to {control_plane_url}. "
        "Check --url (the control plane as the node reaches it). The running agent, if "
        f"any, was left alone with its token. Agent output: {detail}"
    )


def _agent_start(session: NodeSession, *, argv: list[str]) -> str:
    """Start the agent detached; once it is alive a second later, stop the running one
    (agent.pid) and move the token and log into place. Returns the new pid."""
    quoted = shlex.quote(_agent_dir())
    # The agent reads its token once, at start: the file can move after that.
    result = session.run(
        f"cd {quoted} && "
        f"{{ {shlex.join(['setsid', *argv])} < /dev/null > agent.log.new 2>&1 & }}; "
        "new=$!; sleep 1; "
        'if ! kill -0 "$new" 2>/dev/null; then tail -20 agent.log.new >&2; '
        "rm -f token.new; exit 1; fi; "
        'if [ -s agent.pid ]; then kill "$(cat agent.pid)" 2>/dev/null; fi; '
        'mv token.new token && mv agent.log.new agent.log && echo "$new" > agent.pid && '
        'echo "$new"'
    )
    if result.exit_status != 0:
        raise AgentDidNotStart(
            f"The agent on {session.node.name} did not start: {result.stderr.strip()}"
        )
    return result.stdout.strip()


# --------------------------------------------------------------------------- host keys


def node_host_key_approve(*, key_id: int, by: User) -> NodeHostKey:
    """Trust this host key for its node, and only this one (older keys are removed)."""
    with transaction.atomic():
        key = NodeHostKey.objects.select_for_update().filter(pk=key_id).first()
        if key is None:
            raise NotFound(f"Host key {key_id} does not exist.")
        NodeHostKey.objects.filter(node_id=key.node_id).exclude(pk=key.pk).delete()
        key.approved_by = by
        key.approved_at = timezone.now()
        key.save(update_fields=["approved_by", "approved_at"])
    logger.info("Host key %s of node %s approved by %s.", key.fingerprint, key.node_id, by)
    return key


# --------------------------------------------------------------------------- liveness


def _return_state_for(state: str) -> str:
    """Where a node taken DOWN for silence or unreachability goes when it answers again:
    a drain an admin asked for survives the outage; UP and SUSPECT return to UP."""
    if state in {NodeState.DRAINING, NodeState.DRAINED}:
        return state
    return NodeState.UP


# A drained node taken DOWN keeps its drain's reason after this mark in its own, so that
# it comes back with who drained it and why, not with the outage's reason (one field:
# the admin sees both while it is down).
ON_RETURN = " On return: "


REASON_MAX_LENGTH = Node._meta.get_field("state_reason").max_length


def reason_fit(front: str, sep: str, kept: str, *, front_min: int = 1) -> str:
    """`front`, `sep` and `kept` in one node reason (255 characters), cutting `front`
    (its end marked "…"), not `kept`: who drained the node and why, which the node comes
    back with, must not lose its tail to why it is down or to a fault put in front of it.

    At least `front_min` characters of `front` stay (the "…" counts); only a `kept` too
    long for that is cut too, at its end (over 242 characters after ON_RETURN: a drain
    reason as long as the dashboard takes, by a username of over 29 characters).
    """
    text = f"{front}{sep}{kept}"
    if len(text) <= REASON_MAX_LENGTH:
        return text
    room = max(REASON_MAX_LENGTH - len(sep) - len(kept), front_min, 1)
    if len(front) > room:
        front = f"{front[: room - 1]}…"
    return f"{front}{sep}{kept}"[:REASON_MAX_LENGTH]


def node_reason_down(outage: str, on_return: str) -> str:
    """A DOWN node's reason: why it is down, then the reason it comes back with (after
    ON_RETURN), which survives whole (`reason_fit`)."""
    return reason_fit(outage, ON_RETURN, on_return)


def _outage_reason(reason: str, *, node: Node) -> str:
    """The reason of `node` taken DOWN for `reason`, with its drain's reason kept."""
    if node.state in {NodeState.DRAINING, NodeState.DRAINED} and node.state_reason:
        return node_reason_down(reason, node.state_reason)
    return reason


def node_reason_on_return(*, state_reason: str, return_state: str) -> str:
    """The reason a node DOWN with `state_reason` has once back in `return_state`: the
    part kept after ON_RETURN; without that mark (a fault reported while it was down
    replaced it), the whole reason; empty back UP."""
    if return_state in {"", NodeState.UP}:
        return ""
    _, mark, before = state_reason.partition(ON_RETURN)
    return before if mark else state_reason


def _node_set_state(
    *,
    node_id: int,
    to_state: NodeState | str,
    reason: str,
    expected: list[str] | None = None,
    return_state: str = "",
    silent_since: datetime | None = None,
) -> bool:
    """Conditional UPDATE of a node's state; False when it was not in `expected` (or,
    with `silent_since`, when a heartbeat arrived after it)."""
    nodes = Node.objects.filter(pk=node_id)
    if expected is not None:
        nodes = nodes.filter(state__in=expected)
    if silent_since is not None:
        nodes = nodes.filter(last_heartbeat_at__lt=silent_since)
    return nodes.update(state=to_state, state_reason=reason[:255], return_state=return_state) == 1


def _lose_and_requeue(*, job_id: int, attempt: int, message: str) -> None:
    """STARTING/RUNNING → LOST → PENDING (PREEMPTING → PENDING): not charged as a retry."""
    job = Job.objects.filter(pk=job_id, attempt=attempt).only("state").first()
    if job is None:
        return
    try:
        # One transaction: a crash between LOST and PENDING would leave the job LOST, a
        # state no round, poll or sweep reads (the sweep requeues any it finds anyway).
        with transaction.atomic():
            if job.state in {JobState.STARTING, JobState.RUNNING}:
                job_mark_lost(job_id=job_id, message=message, attempt=attempt)
                job_requeue(job_id=job_id, message=f"{message} Requeued.", attempt=attempt)
            elif job.state == JobState.PREEMPTING:
                job_requeue(job_id=job_id, message=f"{message} Requeued.", attempt=attempt)
    except ApplicationError as exc:  # moved on meanwhile
        logger.info("Job %s left alone: %s", job_id, exc)


def _node_take_down(
    *, node: Node, reason: str, expected: list[str], silent_since: datetime | None = None
) -> bool:
    """DOWN, and every live attempt there LOST and requeued (not charged as a retry).

    The one way a node goes DOWN, so that no path leaves its jobs RUNNING on a node
    nothing polls any more. False when the node was no longer in `expected`, or was
    DOWN already: then its reason and return_state stay as whoever took it down left
    them (a second launch giving up at the same time would otherwise clear return_state,
    which reads as an admin's DOWN, and the node would never come back); its live
    attempts are requeued all the same (whoever took it down may not have reached them).
    """
    if node.state == NodeState.DOWN:
        taken = False
    elif _node_set_state(
        node_id=node.pk,
        to_state=NodeState.DOWN,
        reason=_outage_reason(reason, node=node),
        expected=expected,
        return_state=_return_state_for(node.state),
        silent_since=silent_since,
    ):
        taken = True
        node_event_notify(event="node_down", node=node.name, reason=reason)
    else:
        return False
    cause = reason[:1].lower() + reason[1:].rstrip(".")
    for live in live_attempts_on_node(node_id=node.pk):
        _lose_and_requeue(
            job_id=live.job_id,
            attempt=live.attempt,
            message=f"Node {node.name} went down ({cause}).",
        )
    return taken


def node_liveness_sweep(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Mark silent nodes SUSPECT, then DOWN, and requeue the jobs of DOWN nodes.

    Only real nodes that have sent at least one heartbeat are judged (a node never seen
    has no agent yet). `now` is injected so tests control the clock.
    1. UP nodes silent for GPULAB_NODE_SUSPECT_SECONDS → SUSPECT: nothing new starts
       there, running jobs are left alone (a network blip should not kill them).
    2. Any node silent for GPULAB_NODE_DOWN_SECONDS → DOWN; its live attempts become LOST
       and are requeued, not charged against the owner's retries.
    Returns the names of the nodes moved, by new state.
    """
    now = now or timezone.now()
    suspect_before = now - timedelta(seconds=settings.GPULAB_NODE_SUSPECT_SECONDS)
    down_before = now - timedelta(seconds=settings.GPULAB_NODE_DOWN_SECONDS)
    real = Node.objects.filter(simulated=False, last_heartbeat_at__isnull=False)
    moved: dict[str, list[str]] = {"suspect": [], "down": []}
    for node in real.filter(state=NodeState.UP, last_heartbeat_at__lt=suspect_before):
        seconds = int((now - node.last_heartbeat_at).total_seconds())
        if _node_set_state(
            node_id=node.pk,
            to_state=NodeState.SUSPECT,
            reason=f"No heartbeat for {seconds} s.",
            expected=[NodeState.UP],
            silent_since=suspect_before,
        ):
            moved["suspect"].append(node.name)
    silent = real.filter(last_heartbeat_at__lt=down_before).exclude(state=NodeState.DOWN)
    for node in silent:
        seconds = int((now - node.last_heartbeat_at).total_seconds())
        # Re-checked in the UPDATE: a heartbeat that arrived since this read keeps it up.
        if _node_take_down(
            node=node,
            reason=f"No heartbeat for {seconds} s.",
            expected=[node.state],
            silent_since=down_before,
        ):
            moved["down"].append(node.name)
    jobs_lost_requeue()
    return moved


def node_heartbeat_seen(*, node_id: int, now: datetime | None = None) -> bool:
    """Record a heartbeat. A SUSPECT node is UP again at once (it lost nothing); a DOWN
    node that lost its jobs stays DOWN until `node_return_reconcile` has stopped its
    stale attempts. Returns True when the node needs that reconcile."""
    now = now or timezone.now()
    Node.objects.filter(pk=node_id).update(last_heartbeat_at=now)
    _node_set_state(node_id=node_id, to_state=NodeState.UP, reason="", expected=[NodeState.SUSPECT])
    # Only a node the sweep took down comes back by itself; an admin's DOWN stays.
    return (
        Node.objects.filter(pk=node_id, state=NodeState.DOWN, last_heartbeat_at__isnull=False)
        .exclude(return_state="")
        .exists()
    )


def node_return_reconcile(*, node_id: int, grace_seconds: int = 10) -> list[tuple[int, int]]:
    """A DOWN node is back: stop every attempt still running there (all were requeued
    when it went down, so each is stale), then put the node back UP.

    Stale attempts are stopped before the node rejoins the pool, so a new attempt never
    shares its GPUs with an old one. Returns the (job, attempt) pairs stopped.

    Where it returns to, and with which reason, is read only after the SSH work, with
    the row locked: an admin's drain or undrain (`cluster.services`), or a fault a
    heartbeat recorded (`agents.heartbeats`), during those seconds changed both, and
    the values read before it would write the old ones back.
    """
    node = Node.objects.get(pk=node_id)
    if node.state != NodeState.DOWN:
        # Back already (a reconcile queued before it came back, or an admin's hand): the
        # node poll stops whatever is stale on a node that is not DOWN.
        logger.info("Return reconcile of node %s skipped: it is %s.", node.name, node.state)
        return []
    with node_ssh(node) as session:
        read_at = timezone.now()
        keep = live_attempts_on_node(node_id=node_id)
        stop = _stop_stale(session, keep=keep, grace_seconds=grace_seconds)
    if not stop.listed:
        # Back UP without knowing what still runs there could double-book its GPUs.
        raise NodeUnreachable(f"Node {node.name} could not list what runs on it.")
    _release_stopped(node_id=node_id, ended_before=read_at, kept=keep, still=stop.still_running)
    stale = stop.stopped
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(pk=node_id, state=NodeState.DOWN).first()
        if node is None:
            return stale  # back already (another reconcile of the same return)
        back_to = node.return_state or NodeState.UP
        reason = node_reason_on_return(state_reason=node.state_reason, return_state=back_to)
        _node_set_state(node_id=node_id, to_state=back_to, reason=reason)
        # "UP", or "DRAINED: <why>" for a node drained through its outage.
        back = str(back_to).upper() + (f": {reason}" if reason else "")
        node_event_notify(event="node_back", node=node.name, reason=back)
    return stale


def launch_undelivered_mark(*, job_id: int, attempt: int) -> None:
    """Record on a STARTING job that its launch was never sent to a worker.

    Recorded in the database, not in Redis: the broker that refused the task is usually
    Redis itself. The job's reason carries it (a STARTING job has no other reason), so
    its owner sees why it is not starting yet. Only attempts on real nodes: a simulated
    launch runs in-process and has no task to lose. Never raises.
    """
    try:
        Job.objects.filter(
            pk=job_id,
            attempt=attempt,
            state=JobState.STARTING,
            allocations__attempt=attempt,
            allocations__device__node__simulated=False,
        ).update(reason=LAUNCH_UNDELIVERED_REASON)
    except Exception:
        logger.exception("Job %s attempt %s: its lost launch was not recorded.", job_id, attempt)


def undelivered_launches_request() -> list[tuple[int, int]]:
    """Ask again for the launches a round could not send; returns those sent now.

    Each one is un-marked once its task is on the queue; one that fails again keeps its
    mark for the next poll. No launch task of these ever reached a worker, so none is
    under way to race the one sent here (on the node, a launch is idempotent anyway).
    """
    sent: list[tuple[int, int]] = []
    for job_id, attempt in launches_undelivered():
        try:
            agent_launch_request(job_id=job_id, attempt=attempt)
        except Exception:
            logger.warning(
                "Launch of job %s attempt %s still not sent; the next poll tries again.",
                job_id,
                attempt,
                exc_info=True,
            )
            continue
        # Whatever state the launch has taken the job to meanwhile, the mark goes.
        Job.objects.filter(pk=job_id, attempt=attempt, reason=LAUNCH_UNDELIVERED_REASON).update(
            reason=""
        )
        sent.append((job_id, attempt))
    if sent:
        logger.info("Launches sent again after a lost dispatch: %s", sent)
    return sent
