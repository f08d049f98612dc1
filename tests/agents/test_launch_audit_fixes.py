"""Launch, stop and SSH defects an audit found: each test failed before its fix.

Most run through the real OpenSSH server of tests/agents/conftest.py; docker is a small
shell stand-in on the PATH (no daemon in the tests).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import threading
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone

from agents import services, tasks
from agents.runtimes import (
    WRAPPER,
    LaunchSpec,
    docker_logs_script,
    wrapped_stop_script,
)
from agents.services import (
    _launch_script,
    _parse_docker_status,
    _stop_stale,
    agent_launch,
    agent_node_poll,
    agent_stop,
)
from agents.ssh import NodeSession, NodeUnreachable, SshMisconfigured, node_ssh
from cluster.choices import NodeState, Runtime
from cluster.models import Device, Node
from jobs.choices import JobState
from jobs.forms import JobSubmitForm, initial_from_job
from jobs.models import Allocation, Job
from jobs.services import (
    JobSpec,
    job_cancel,
    job_mark_running,
    job_preempt,
    job_start,
    job_submit,
)
from jobs.validation import command_errors, env_errors
from scheduler.models import MAX_PREEMPTION_GRACE_SECONDS
from scheduler.services import scheduling_round_run
from tests.agents.conftest import started_job, wait_for
from tests.factories import DeviceFactory, JobFactory, NodeFactory


def _group_members(pgid: int) -> list[str]:
    """Live (not zombie) processes of a process group, as `pid state`.

    Zombies still answer `kill -0`, and the test containers' init may never reap them.
    """
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            line = stat.read_text()
        except OSError:
            continue
        state, _, group = line.rsplit(") ", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(f"{line.split()[0]} {state}")
    return members


def _pgid(run_root: Path, job: Job) -> int:
    return int((run_root / f"gpulab-{job.pk}-{job.attempt}" / "pid").read_text())


def _finished(node: Node, job_id: int) -> Job:
    def done() -> Job | None:
        agent_node_poll(node_id=node.pk)
        job = Job.objects.get(pk=job_id)
        return job if job.state in {JobState.SUCCEEDED, JobState.FAILED} else None

    return wait_for(done)


# --------------------------------------------------------------- 1. leftovers in the group


def test_processes_a_job_leaves_in_its_group_are_ended_before_its_gpu_is_released(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = started_job(ssh_node, command=["sh", "-c", "sleep 300 & echo started; exit 0"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    pgid = _pgid(ssh_settings, job)

    finished = _finished(ssh_node, job.pk)

    assert (finished.state, finished.exit_code) == (JobState.SUCCEEDED, 0)
    assert Allocation.objects.get(job=job).released_at is not None
    assert _group_members(pgid) == []


def test_a_leftover_that_ignores_sigterm_is_killed_and_the_programs_exit_code_kept(
    tmp_path: Path,
) -> None:
    program = "trap '' TERM; sleep 300 & exit 7"
    wrapper = subprocess.Popen(["setsid", "-w", "sh", "-c", WRAPPER, "t", "sh", "-c", program],
                               cwd=tmp_path)  # fmt: skip
    wrapper.wait(timeout=20)  # without the KILL the leftover would hold it for 300 s

    assert (tmp_path / "exit_code").read_text() == "7\n"
    assert _group_members(int((tmp_path / "pid").read_text())) == []


def test_a_stop_during_the_leftover_cleanup_knows_the_program_had_ended(tmp_path: Path) -> None:
    """The program exited by itself; the wrapper is still ending a leftover (up to 10 s)
    when a preemption's stop arrives: the job ended, it is not to be requeued."""
    program = "trap '' TERM; sleep 300 & exit 0"
    wrapper = subprocess.Popen(["setsid", "-w", "sh", "-c", WRAPPER, "t", "sh", "-c", program],
                               cwd=tmp_path)  # fmt: skip
    wait_for(lambda: (tmp_path / "program_exit").exists())
    assert not (tmp_path / "exit_code").exists()  # the leftover is still being ended

    stop = subprocess.run(["sh", "-c", wrapped_stop_script(str(tmp_path), 2)],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    wrapper.wait(timeout=20)

    # What follows is the status after the stop's KILL, which depends on who reaps here.
    assert stop.stdout.splitlines()[0] == "was-exited"


# A shell that dies at once on SIGTERM around a program that checkpoints for 6 s:
# once a stop was sent, the wrapper must leave it the stop's whole grace period (10 s),
# not cut it at its own 5 s.
SLOW_CHECKPOINT = (
    'sh -c \'trap "sleep 6; echo saved > checkpoint; exit 0" TERM; '
    "echo ready; while :; do sleep 0.2; done' & wait"
)


def test_a_stop_leaves_leftovers_the_whole_grace_period_to_checkpoint(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = started_job(ssh_node, command=["sh", "-c", SLOW_CHECKPOINT])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    run_dir = ssh_settings / f"gpulab-{job.pk}-1"
    wait_for(lambda: (run_dir / "stdout").read_text() == "ready\n")
    job_preempt(job_id=job.pk, reason="test")

    agent_stop(job_id=job.pk, attempt=1, grace_seconds=10)

    assert (run_dir / "checkpoint").read_text() == "saved\n"


# --------------------------------------------------------------- 2. output and deadlines


def test_a_command_with_megabytes_on_stderr_completes_and_keeps_the_tail_of_each_stream(
    ssh_node: Node,
) -> None:
    with node_ssh(ssh_node) as session:
        result = session.run(
            "head -c 3000000 /dev/zero | tr '\\0' x >&2; echo end >&2; echo done", timeout=10
        )

    assert (result.exit_status, result.stdout) == (0, "done\n")
    assert result.stderr.endswith("xxxxend\n")
    assert len(result.stderr) < 3000000  # capped


def test_the_command_timeout_is_a_deadline_even_for_a_command_that_keeps_printing(
    ssh_node: Node,
) -> None:
    # Output every second, so a per-read timeout of 2 s never fires and the command would
    # end normally after 8 s; a deadline of 2 s ends it first.
    with node_ssh(ssh_node) as session, pytest.raises(NodeUnreachable, match="no end after 2"):
        session.run("for i in 1 2 3 4 5 6 7 8; do echo x; sleep 1; done", timeout=2)


FAKE_DOCKER = """#!/bin/sh
# A stand-in: `logs` floods stderr unless the container has a log of its own. `run` is
# run with --init: Docker's tini starts and, for a program not on the PATH, prints its
# FATAL line and exits 127 (`docker run -d` has succeeded by then). Told to (`fail`), it
# leaves the container "created" as an OCI create failure does.
last() { for a in "$@"; do n=$a; done; }
case "$1" in
  logs)
    last "$@"
    [ -e "$STATE/$n.log" ] && { cat "$STATE/$n.log" >&2; exit 0; }
    echo "epoch 1 done"; head -c 3000000 /dev/zero | tr '\\0' e >&2; echo >&2 ;;
  container)
    last "$@"
    [ -e "$STATE/$n" ] && { cat "$STATE/$n"; exit 0; }
    echo "Error: No such container: $n" >&2; exit 1 ;;
  rm) last "$@"; rm -f "$STATE/$n" "$STATE/$n.log"; echo "rm $n" >> "$STATE/log" ;;
  run)
    init=
    while [ "$1" != --name ]; do [ "$1" = --init ] && init=1; shift; done
    n=$2; echo "run $n" >> "$STATE/log"
    if [ -e "$STATE/fail" ]; then
      echo "created 127 c0ffee" > "$STATE/$n"
      echo 'docker: Error response from daemon: failed to create task for container:' \
           'OCI runtime create failed: exec: "/sbin/docker-init": no such file' >&2
      exit 127
    fi
    while case "$1" in --*) true ;; *) false ;; esac; do shift 2; done
    program=$2  # after the image
    if [ -n "$init" ] && ! command -v "$program" > /dev/null; then
      echo "exited 127 c0ffee" > "$STATE/$n"
      echo "[FATAL tini (7)] exec $program failed: No such file or directory" > "$STATE/$n.log"
    else
      echo "running 0 c0ffee" > "$STATE/$n"
    fi
    echo c0ffee ;;
esac
"""


@pytest.fixture
def fake_docker(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin", "STATE": str(tmp_path)}


def _sh(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)


def test_docker_logs_are_cut_on_the_node_to_the_stream_and_bytes_asked_for(
    fake_docker: dict[str, str],
) -> None:
    stdout = _sh(docker_logs_script("gpulab-1-1", "stdout", 2000, 1000), fake_docker)
    stderr = _sh(docker_logs_script("gpulab-1-1", "stderr", 2000, 1000), fake_docker)

    assert stdout.stdout == "epoch 1 done\n"
    assert stderr.stdout == "e" * 999 + "\n"


# --------------------------------------------------------------- 3. docker "created"


def spec(**changes: object) -> LaunchSpec:
    values: dict[str, object] = {
        "job_id": 42,
        "attempt": 3,
        "image": "busybox",
        "command": ["sh", "train.sh"],
        "env": {},
        "device_uuids": ["GPU-aaaa"],
        "run_root": "/var/lib/gpulab/runs",
    }
    values.update(changes)
    return LaunchSpec(**values)  # type: ignore[arg-type]


def test_a_container_docker_could_not_start_is_a_failed_launch_and_is_removed(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "fail").touch()

    result = _sh(_launch_script(spec(), Runtime.DOCKER), fake_docker)

    assert result.returncode == 127
    assert "docker-init" in result.stderr
    assert not (tmp_path / "gpulab-42-3").exists()
    assert (tmp_path / "log").read_text() == "run gpulab-42-3\nrm gpulab-42-3\n"


def test_a_program_dockers_init_cannot_start_is_a_failed_launch_and_is_removed(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    # Under --init, `docker run -d` succeeds: tini is what fails, a moment later.
    result = _sh(_launch_script(spec(command=["pyhton", "train.py"]), Runtime.DOCKER), fake_docker)

    assert result.returncode == 127
    assert result.stderr == "[FATAL tini (7)] exec pyhton failed: No such file or directory\n"
    assert not (tmp_path / "gpulab-42-3").exists()
    assert (tmp_path / "log").read_text() == "run gpulab-42-3\nrm gpulab-42-3\n"


def test_a_redelivered_launch_retries_a_container_whose_program_init_could_not_start(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    # The first delivery's worker died between `docker run` and its look at the container.
    (tmp_path / "gpulab-42-3").write_text("exited 127 dead\n")
    (tmp_path / "gpulab-42-3.log").write_text("[FATAL tini (7)] exec sh failed: gone\n")

    result = _sh(_launch_script(spec(), Runtime.DOCKER), fake_docker)

    assert (result.returncode, result.stdout) == (0, "c0ffee\n")
    assert (tmp_path / "log").read_text() == "rm gpulab-42-3\nrun gpulab-42-3\n"


def test_a_program_that_ran_and_failed_is_a_launched_job(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    # Its own exit code (even 127, from a shell's missing command) is the job's to report.
    (tmp_path / "gpulab-42-3").write_text("exited 127 beef\n")
    (tmp_path / "gpulab-42-3.log").write_text("train.sh: 3: pyhton: not found\n")

    result = _sh(_launch_script(spec(), Runtime.DOCKER), fake_docker)

    assert (result.returncode, result.stdout) == (0, "beef\n")
    assert not (tmp_path / "log").exists()


def test_a_redelivered_launch_replaces_a_container_left_created_by_a_failed_start(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "gpulab-42-3").write_text("created 127 dead\n")

    result = _sh(_launch_script(spec(), Runtime.DOCKER), fake_docker)

    assert (result.returncode, result.stdout) == (0, "c0ffee\n")


def test_a_container_being_started_by_another_delivery_counts_as_launched(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "gpulab-42-3").write_text("created 0 beef\n")

    result = _sh(_launch_script(spec(), Runtime.DOCKER), fake_docker)

    assert (result.returncode, result.stdout) == (0, "beef\n")
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize(
    ("stdout", "state", "exit_code"),
    [
        ("created 127", "exited", 127),
        ("created 126", "exited", 126),
        ("created 0", "running", None),
    ],
)
def test_a_created_container_with_an_exit_code_never_ran(
    stdout: str, state: str, exit_code: int | None
) -> None:
    status = _parse_docker_status(stdout, 0)
    assert (status.state, status.exit_code) == (state, exit_code)


# --------------------------------------------------------------- 4. cancel during launch


def test_a_job_cancelled_during_its_launch_keeps_its_gpu_until_the_launch_stopped_it(
    ssh_node: Node, ssh_settings: Path, owner, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    Device.objects.filter(node=ssh_node, index=1).delete()  # one GPU: both jobs want it
    job = started_job(ssh_node, command=["sleep", "300"], owner=owner)
    waiting = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=1))
    real_ssh = services.node_ssh
    seen: dict[str, object] = {}

    @contextmanager
    def slow_ssh(node):  # type: ignore[no-untyped-def]
        if not seen:
            # The launch passed its STARTING check and pulls the image; meanwhile the
            # owner cancels, a poll finds nothing running and a round runs.
            seen["waiting"] = None
            job_cancel(job_id=job.pk, by=owner)
            agent_node_poll(node_id=ssh_node.pk)
            scheduling_round_run()
            seen["waiting"] = Job.objects.get(pk=waiting.pk).state
        with real_ssh(node) as session:
            yield session

    monkeypatch.setattr(services, "node_ssh", slow_ssh)
    agent_launch(job_id=job.pk, attempt=job.attempt)

    assert seen["waiting"] == JobState.PENDING
    assert _group_members(_pgid(ssh_settings, job)) == []
    assert Allocation.objects.get(job=job).released_at is not None
    scheduling_round_run()
    assert Job.objects.get(pk=waiting.pk).state == JobState.STARTING


def test_the_poll_releases_a_cancelled_launch_once_no_launch_can_be_under_way(
    ssh_node: Node, owner
) -> None:  # type: ignore[no-untyped-def]
    job = started_job(ssh_node, command=["sleep", "300"], owner=owner)
    job_cancel(job_id=job.pk, by=owner)

    agent_node_poll(node_id=ssh_node.pk)
    assert Allocation.objects.get(job=job).released_at is None

    long_ago = timezone.now() - timedelta(seconds=services.launch_time_limit_seconds() + 1)
    Allocation.objects.filter(job=job).update(started_at=long_ago)
    agent_node_poll(node_id=ssh_node.pk)
    assert Allocation.objects.get(job=job).released_at is not None


def test_the_poll_still_releases_a_cancelled_job_that_had_been_running(
    ssh_node: Node, owner
) -> None:  # type: ignore[no-untyped-def]
    job = started_job(ssh_node, command=["sleep", "300"], owner=owner)
    job_mark_running(job_id=job.pk)
    job_cancel(job_id=job.pk, by=owner)

    agent_node_poll(node_id=ssh_node.pk)

    assert Allocation.objects.get(job=job).released_at is not None


# --------------------------------------------------------------- 5, 6. key and reasons


@pytest.fixture
def unpolled_node(db: None) -> Node:
    node = NodeFactory(name="real-0")
    DeviceFactory(node=node, index=0)
    DeviceFactory(node=node, index=1)
    return node


def test_a_missing_local_key_is_a_configuration_error_not_an_unreachable_node(
    unpolled_node: Node, settings, caplog
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_SSH_KEY_FILE = "/nonexistent/gpulab_key"
    running = started_job(unpolled_node, command=["sleep", "300"])
    job_mark_running(job_id=running.pk)
    launching = JobFactory(command=["true"])
    job_start(job_id=launching.pk, device_ids=[unpolled_node.devices.get(index=1).pk])
    with pytest.raises(SshMisconfigured, match="cannot be read"), node_ssh(unpolled_node):
        pass

    with caplog.at_level(logging.ERROR, logger="agents.tasks"):
        tasks.agent_launch_task.apply(
            kwargs={"job_id": launching.pk, "attempt": 1}, retries=tasks.SSH_RETRIES
        )

    unpolled_node.refresh_from_db()
    assert (unpolled_node.state, unpolled_node.state_reason) == (NodeState.UP, "")
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=launching.pk).state == JobState.STARTING
    assert "/nonexistent/gpulab_key" in caplog.text


def test_students_see_a_generic_reason_for_a_node_ssh_could_not_reach(
    unpolled_node: Node, owner, api_as, monkeypatch, caplog
) -> None:  # type: ignore[no-untyped-def]
    job = started_job(unpolled_node, command=["true"])
    secret = "Node real-0 refused gpulab's key for user gpulab-svc (/etc/gpulab/secret/id)"

    @contextmanager
    def refused(node):  # type: ignore[no-untyped-def]
        raise NodeUnreachable(secret)
        yield

    monkeypatch.setattr(services, "node_ssh", refused)
    with caplog.at_level(logging.WARNING, logger="agents.services"):
        tasks.agent_launch_task.apply(
            kwargs={"job_id": job.pk, "attempt": 1}, retries=tasks.SSH_RETRIES
        )

    body = api_as(owner).get("/api/v1/cluster/").json()
    assert [node["state_reason"] for node in body["nodes"]] == ["Unreachable over SSH."]
    assert "gpulab-svc" not in str(body)
    assert secret in caplog.text  # for the admin, in the worker's log


# --------------------------------------------------------------- 7. launch size budget


def test_a_command_or_env_too_long_for_one_shell_argument_is_refused_at_submission(
    owner, small_cluster, api_as
) -> None:  # type: ignore[no-untyped-def]
    long_argv = ["echo"] + ["a" * 8000] * 20  # each argument is allowed, all 160 kB are not
    assert command_errors(long_argv) and "too long to launch" in command_errors(long_argv)[0]
    long_env = {f"V{i}": "b" * 8000 for i in range(5)}
    assert env_errors(long_env) and "too long to launch" in env_errors(long_env)[0]
    # Quotes count as they will reach the node: twice quoted, ' takes 17 bytes.
    assert command_errors(["echo", "'" * 4000])

    client = api_as(owner)
    for field, changes in (("command", {"command": long_argv}), ("env", {"env": long_env})):
        submission = {"image": "busybox", "command": ["true"], "num_gpus": 1, **changes}
        response = client.post("/api/v1/jobs/", submission, format="json")
        assert response.status_code == 400
        assert field in response.json()
    assert not Job.objects.exists()


def test_a_command_the_api_accepted_can_be_cloned_and_resubmitted_through_the_form(
    owner, small_cluster, api_as
) -> None:  # type: ignore[no-untyped-def]
    argv = ["python", "train.py", *["--opt=" + "c" * 7000] * 4]  # 28 kB: over the old 16384
    response = api_as(owner).post(
        "/api/v1/jobs/", {"image": "busybox", "command": argv, "num_gpus": 1}, format="json"
    )
    assert response.status_code == 201, response.content
    initial = initial_from_job(Job.objects.get(pk=response.json()["id"]), user=owner)
    data = {key: value for key, value in initial.items() if value is not None}

    form = JobSubmitForm(data=data, user=owner)

    assert form.is_valid(), form.errors
    assert form.cleaned_data["command"] == argv


# --------------------------------------------------------------- 8b. stale stops together


def test_stale_attempts_are_stopped_together_within_one_grace_period(
    ssh_node: Node, ssh_settings: Path
) -> None:
    jobs = []
    for index in range(2):
        job = JobFactory(command=["sh", "-c", "trap '' TERM; echo up; sleep 300"])
        job = job_start(job_id=job.pk, device_ids=[ssh_node.devices.get(index=index).pk])
        agent_launch(job_id=job.pk, attempt=job.attempt)
        jobs.append(job)
    for job in jobs:
        run_dir = ssh_settings / f"gpulab-{job.pk}-1"
        wait_for(lambda run_dir=run_dir: (run_dir / "stdout").read_text() == "up\n")

    with node_ssh(ssh_node) as session:
        scripts: list[str] = []
        run = session.run

        def recorded(script: str, **kwargs: Any) -> Any:
            scripts.append(script)
            return run(script, **kwargs)

        session.run = recorded  # type: ignore[method-assign]
        stopped = _stop_stale(session, keep=[], grace_seconds=3).stopped

    assert sorted(stopped) == sorted((job.pk, 1) for job in jobs)
    # One command signals both and waits one grace period, not one command per attempt.
    (stop,) = [script for script in scripts if "kill -TERM" in script]
    assert all(f"gpulab-{job.pk}-1" in stop for job in jobs)
    for job in jobs:
        assert _group_members(_pgid(ssh_settings, job)) == []


def test_the_poll_and_the_return_reconcile_may_wait_the_longest_grace_period() -> None:
    assert tasks.agent_node_poll_task.time_limit > MAX_PREEMPTION_GRACE_SECONDS
    assert tasks.node_return_reconcile_task.time_limit > MAX_PREEMPTION_GRACE_SECONDS


class _LastDataWithEof:
    """A channel whose transport thread delivers the last output and the EOF together,
    right after the reader has found the buffers empty (a rare interleaving, made certain)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.eof_received = False
        self.closed = False
        self.stderr_checks = 0
        self.status_event = threading.Event()
        self.status_event.set()
        self._read, self._write = os.pipe()
        os.write(self._write, b"x")  # select() always finds it readable

    def fileno(self) -> int:
        return self._read

    def exec_command(self, command: str) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def recv_ready(self) -> bool:
        return bool(self.buffer)

    def recv(self, size: int) -> bytes:
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def recv_stderr_ready(self) -> bool:
        self.stderr_checks += 1
        if self.stderr_checks == 2:
            self.buffer, self.eof_received = b"hello\n", True
        return False

    def recv_stderr(self, size: int) -> bytes:
        return b""

    def recv_exit_status(self) -> int:
        return 0

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


def test_output_that_arrives_with_the_eof_is_not_lost() -> None:
    channel = _LastDataWithEof()
    transport = SimpleNamespace(is_active=lambda: True, open_session=lambda timeout: channel)
    client = SimpleNamespace(get_transport=lambda: transport)
    session = NodeSession(node=SimpleNamespace(name="n"), client=client, timeout=5)  # type: ignore[arg-type]

    assert session.run("echo hello").stdout == "hello\n"


def test_node_session_run_is_still_a_plain_command_runner(ssh_node: Node) -> None:
    # stdin is closed (a command reading it ends), exit statuses come back as they are.
    with node_ssh(ssh_node) as session:
        result = session.run("cat; echo " + shlex.quote("a b") + "; exit 4")
    assert (result.exit_status, result.stdout, result.stderr) == (4, "a b\n", "")
