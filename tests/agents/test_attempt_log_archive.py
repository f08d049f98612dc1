"""An ended attempt's log is copied into the database (AttemptLog) and shown from there:
without SSH, while its node is down, and after the node removed the attempt.

The `process` runtime against the real test sshd; the `docker` script against a stand-in
`docker` that answers `container inspect` and `logs` as the real one does.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.logs import job_log_tail
from agents.models import AttemptLog
from agents.runtimes import ATTEMPT_NOT_ON_NODE, LOG_TAIL_BYTES, archived_logs_script
from agents.selectors import attempts_to_archive
from agents.services import agent_launch, agent_node_logs_archive, agent_node_poll, agent_node_prune
from agents.tasks import agent_logs_archive_all_task
from cluster.choices import NodeState
from cluster.models import Node
from config.celery_app import SSH_QUEUE, app, queue_name, task_route
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_launch_failed
from tests.agents.conftest import started_job, wait_for
from tests.factories import DeviceFactory, JobFactory, NodeFactory, UserFactory

PRINTS = ["sh", "-c", "echo one; echo two; echo oops >&2; exit 3"]


def _ended(node: Node, *, command: list[str] = PRINTS, released_days_ago: float = 0) -> Job:
    """A job that ran `command` on the node to its end, as the poll leaves it."""
    job = started_job(node, command=command)
    agent_launch(job_id=job.pk, attempt=job.attempt)

    def done() -> Job | None:
        agent_node_poll(node_id=node.pk)
        current = Job.objects.get(pk=job.pk)
        return current if current.state in {JobState.SUCCEEDED, JobState.FAILED} else None

    wait_for(done)
    if released_days_ago:
        when = timezone.now() - timedelta(days=released_days_ago)
        Allocation.objects.filter(job_id=job.pk).update(
            started_at=when, ended_at=when, released_at=when
        )
    return Job.objects.get(pk=job.pk)


def test_an_ended_attempts_log_is_copied_and_then_read_without_the_node(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = _ended(ssh_node)

    assert attempts_to_archive() == {ssh_node.pk: [(job.pk, 1)]}
    assert agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]]) == 1

    kept = AttemptLog.objects.get(job=job, attempt=1)
    assert (kept.stdout, kept.stderr, kept.found) == ("one\ntwo\n", "oops\n", True)
    assert attempts_to_archive() == {}  # copied once
    assert agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]]) == 0
    # The node goes down and its run directory is lost: the log is still shown.
    Node.objects.filter(pk=ssh_node.pk).update(state=NodeState.DOWN)
    for path in (ssh_settings / f"gpulab-{job.pk}-1").iterdir():
        path.unlink()
    log = job_log_tail(job=job, stream="stdout", max_lines=200)
    assert (log.text, log.lines, log.archived, log.problem) == ("one\ntwo", 2, True, "")
    assert job_log_tail(job=job, stream="stderr").text == "oops\n"

    client = APIClient()
    client.force_authenticate(job.owner)
    response = client.get(f"/api/v1/agents/jobs/{job.pk}/logs/?stream=stderr")
    assert response.status_code == 200
    assert response.json() == {
        "job": job.pk, "attempt": 1, "stream": "stderr", "text": "oops\n", "archived": True,
    }  # fmt: skip


def test_the_page_says_the_log_is_the_kept_copy(ssh_node: Node, client) -> None:  # type: ignore[no-untyped-def]
    job = _ended(ssh_node)
    agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]])
    client.force_login(job.owner)

    page = client.get(f"/jobs/{job.pk}/logs/?stream=stdout", HTTP_X_REFRESH="1")

    assert page.status_code == 200
    text = page.content.decode()
    assert "one\ntwo</pre>" in text
    assert "attempt 1, as kept when it ended." in text
    assert "data-log-final" in text


def test_another_students_job_log_is_not_shown_from_the_copy(ssh_node: Node) -> None:
    job = _ended(ssh_node)
    agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]])
    client = APIClient()
    client.force_authenticate(UserFactory())

    response = client.get(f"/api/v1/agents/jobs/{job.pk}/logs/")

    assert response.status_code == 404
    assert "one" not in response.content.decode()


def test_a_running_attempt_is_not_copied_and_is_read_live(ssh_node: Node) -> None:
    job = started_job(ssh_node, command=["sh", "-c", "echo live; sleep 30"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: job_log_tail(job=job, stream="stdout").text == "live\n")

    assert attempts_to_archive() == {}
    assert not job_log_tail(job=Job.objects.get(pk=job.pk), stream="stdout").archived


def test_an_attempt_with_a_device_not_yet_released_is_not_copied(ssh_node: Node) -> None:
    job = _ended(ssh_node)
    second = ssh_node.devices.order_by("index").last()
    now = timezone.now()
    # A two-GPU attempt whose second GPU waits for the poll to stop its process.
    Allocation.objects.create(job=job, attempt=1, device=second, started_at=now, ended_at=now)

    assert attempts_to_archive() == {}


def test_only_polled_nodes_attempts_within_the_keep_time_are_copied(
    ssh_node: Node, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    recent = _ended(ssh_node, released_days_ago=6)
    _ended(ssh_node, released_days_ago=8)  # the clean-up copies it, if it has not
    simulated = NodeFactory(name="sim-0", simulated=True)
    device = DeviceFactory(node=simulated, index=0)
    sim_job = JobFactory(state=JobState.SUCCEEDED, attempt=1)
    now = timezone.now()
    Allocation.objects.create(
        job=sim_job, attempt=1, device=device, started_at=now, ended_at=now, released_at=now
    )

    assert attempts_to_archive() == {ssh_node.pk: [(recent.pk, 1)]}
    Node.objects.filter(pk=ssh_node.pk).update(state=NodeState.DOWN)
    assert attempts_to_archive() == {}


def test_newest_attempts_are_copied_first_and_at_most_a_batch_per_node(ssh_node: Node) -> None:
    older = _ended(ssh_node, released_days_ago=2)
    newer = _ended(ssh_node, released_days_ago=1)

    assert attempts_to_archive(per_node=1) == {ssh_node.pk: [(newer.pk, 1)]}
    assert attempts_to_archive() == {ssh_node.pk: [(newer.pk, 1), (older.pk, 1)]}


def test_an_attempt_the_node_no_longer_has_is_recorded_as_not_found(
    ssh_node: Node, ssh_settings: Path
) -> None:
    job = _ended(ssh_node)
    run_dir = ssh_settings / f"gpulab-{job.pk}-1"
    for path in run_dir.iterdir():
        path.unlink()
    run_dir.rmdir()

    assert agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]]) == 1

    kept = AttemptLog.objects.get(job=job)
    assert (kept.found, kept.stdout, kept.stderr) == (False, "", "")
    log = job_log_tail(job=job, stream="stdout")
    assert log.removed
    assert log.problem == (
        "This attempt's log was no longer on node sshnode when it ended, so it could not be kept."
    )
    client = APIClient()
    client.force_authenticate(job.owner)
    assert client.get(f"/api/v1/agents/jobs/{job.pk}/logs/").json()["code"] == "logs_removed"


def test_a_log_with_nul_bytes_is_kept_and_the_batch_and_clean_up_go_on(
    ssh_node: Node, ssh_settings: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    older = _ended(ssh_node, released_days_ago=8)
    binary = _ended(ssh_node, command=["printf", "before\\000after\\n"], released_days_ago=8)

    assert agent_node_prune(node_id=ssh_node.pk) == sorted([(older.pk, 1), (binary.pk, 1)])

    # PostgreSQL's text refuses NUL: kept as the replacement character.
    assert AttemptLog.objects.get(job=binary).stdout == "before\ufffdafter\n"
    assert AttemptLog.objects.get(job=older).stdout == "one\ntwo\n"
    assert list(ssh_settings.iterdir()) == []


def test_an_attempt_whose_launch_made_nothing_on_the_node_is_not_a_lost_log(
    ssh_node: Node,
) -> None:
    job = started_job(ssh_node, command=["true"])
    # Refused before the node was touched (a bad image, a refused label).
    job_launch_failed(job_id=job.pk, message="Image reference 'x y' is not valid.")
    assert attempts_to_archive() == {ssh_node.pk: [(job.pk, 1)]}

    assert agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]]) == 1

    log = job_log_tail(job=Job.objects.get(pk=job.pk), stream="stdout")
    assert (log.removed, log.problem, log.text) == (False, "", "")
    client = APIClient()
    client.force_authenticate(job.owner)
    assert client.get(f"/api/v1/agents/jobs/{job.pk}/logs/").status_code == 200


def test_a_long_log_keeps_its_last_bytes(ssh_node: Node) -> None:
    job = _ended(ssh_node, command=["sh", "-c", "seq 1 100000"])
    agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]])

    kept = AttemptLog.objects.get(job=job)
    assert len(kept.stdout.encode()) == LOG_TAIL_BYTES
    assert kept.stdout.endswith("99999\n100000\n")
    # Cut at a byte count: the page drops the partial first line.
    shown = job_log_tail(job=job, stream="stdout", max_lines=200)
    assert shown.text.splitlines()[-1] == "100000" and shown.lines == 200


def test_the_clean_up_copies_a_log_before_it_removes_the_attempt(
    ssh_node: Node, ssh_settings: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    job = _ended(ssh_node, released_days_ago=8)

    assert agent_node_prune(node_id=ssh_node.pk) == [(job.pk, 1)]

    assert not (ssh_settings / f"gpulab-{job.pk}-1").exists()
    log = job_log_tail(job=job, stream="stdout")
    assert (log.text, log.archived, log.removed) == ("one\ntwo\n", True, False)


def test_the_clean_up_keeps_an_attempt_whose_log_it_could_not_copy(
    ssh_node: Node, ssh_settings: Path, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    job = _ended(ssh_node, released_days_ago=8)
    # The node cannot read it (docker's daemon not answering would do the same).
    monkeypatch.setattr(
        "agents.runtimes.archived_logs_script", lambda **_: "echo 'disk error' >&2; exit 1"
    )

    assert agent_node_prune(node_id=ssh_node.pk) == []

    assert (ssh_settings / f"gpulab-{job.pk}-1" / "stdout").exists()
    assert not AttemptLog.objects.exists()


def test_a_deleted_jobs_attempt_is_removed_without_a_copy(
    ssh_node: Node, ssh_settings: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    job = _ended(ssh_node, released_days_ago=1)
    Job.objects.filter(pk=job.pk).delete()

    assert agent_node_prune(node_id=ssh_node.pk) == [(job.pk, 1)]
    assert not AttemptLog.objects.exists()
    assert agent_node_logs_archive(node_id=ssh_node.pk, attempts=[[job.pk, 1]]) == 0


def test_the_copy_is_fanned_out_every_minute_on_the_ssh_queue(ssh_node: Node, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    job = _ended(ssh_node)
    sent: list[dict] = []
    monkeypatch.setattr(
        "agents.tasks.agent_node_logs_archive_task.apply_async",
        lambda kwargs, **options: sent.append({**kwargs, **options}),
    )

    assert agent_logs_archive_all_task() == 1

    assert sent == [{"node_id": ssh_node.pk, "attempts": [[job.pk, 1]], "expires": 60}]
    app.loader.import_default_modules()
    entries = [e for e in app.conf.beat_schedule.values() if e["task"] == "agents.logs_archive_all"]
    assert [entry["schedule"] for entry in entries] == [60.0]
    route = task_route("agents.node_logs_archive", (), {}, {})
    assert route == {"queue": queue_name(SSH_QUEUE)}


FAKE_DOCKER = """#!/bin/sh
# Containers are directories in $STATE/containers holding their stdout and stderr.
last() { for a in "$@"; do n=$a; done; }
[ -e "$STATE/daemon-down" ] && { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
last "$@"; c="$STATE/containers/$n"
case "$1" in
  container) [ -d "$c" ] || { echo "Error: No such container: $n" >&2; exit 1; } ;;
  logs) [ -d "$c" ] || { echo "Error: No such container: $n" >&2; exit 1; }
        cat "$c/stdout"; cat "$c/stderr" >&2
        [ -e "$c/corrupt" ] && { echo "Error grabbing logs" >&2; exit 1; }
        true ;;
esac
"""


@pytest.fixture
def fake_docker(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "bin" / "docker").chmod(0o755)
    container = tmp_path / "containers" / "gpulab-7-2"
    container.mkdir(parents=True)
    (container / "stdout").write_text("out\n")
    (container / "stderr").write_text("err\n")
    return {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "STATE": str(tmp_path)}


def _docker_copy(name: str, stream: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = archived_logs_script(
        name=name, run_dir=f"/runs/{name}", stream=stream, max_bytes=1000, docker=True
    )
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)


def test_a_docker_copy_reads_each_stream_and_tells_a_missing_container_from_a_failure(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    out, err = (
        _docker_copy("gpulab-7-2", "stdout", fake_docker),
        _docker_copy("gpulab-7-2", "stderr", fake_docker),
    )
    assert (out.returncode, out.stdout, err.returncode, err.stdout) == (0, "out\n", 0, "err\n")

    missing = _docker_copy("gpulab-8-1", "stderr", fake_docker)
    # Not "Error: No such container" kept as the job's stderr.
    assert (missing.returncode, missing.stdout) == (ATTEMPT_NOT_ON_NODE, "")

    # A log Docker cannot read to its end: not a copy, and not Docker's complaint as stderr.
    (tmp_path / "containers" / "gpulab-7-2" / "corrupt").touch()
    for stream in ("stdout", "stderr"):
        corrupt = _docker_copy("gpulab-7-2", stream, fake_docker)
        assert corrupt.returncode == 1 and "docker logs failed" in corrupt.stderr

    (tmp_path / "daemon-down").touch()
    down = _docker_copy("gpulab-7-2", "stdout", fake_docker)
    assert down.returncode == 1 and "Cannot connect" in down.stderr


def test_only_attempt_names_reach_the_docker_copy() -> None:
    with pytest.raises(ValueError, match="not an attempt name"):
        archived_logs_script(
            name="x; rm -rf /", run_dir="/runs/x", stream="stdout", max_bytes=1, docker=True
        )
    with pytest.raises(ValueError, match="stream"):
        archived_logs_script(
            name="gpulab-1-1", run_dir="/runs/gpulab-1-1", stream="env", max_bytes=1, docker=False
        )
