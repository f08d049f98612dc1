"""Finished attempts are removed from nodes after GPULAB_FINISHED_ATTEMPT_KEEP_DAYS.

The `process` runtime against the real test sshd; the `docker` scripts against a stand-in
`docker` that, like the real one, refuses to remove a running container without `-f`.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from celery.schedules import crontab
from django.utils import timezone
from rest_framework.test import APIClient

from agents.logs import job_log_tail
from agents.models import AttemptLog
from agents.runtimes import kept_attempts_script, remove_attempts_script
from agents.selectors import nodes_to_prune
from agents.services import agent_launch, agent_node_poll, agent_node_prune
from cluster.models import Node
from config.celery_app import SSH_QUEUE, app, queue_name, task_route
from jobs.choices import JobState
from jobs.models import Allocation, Job
from tests.agents.conftest import group_alive, started_job, wait_for


def _finished(node: Node, *, released_days_ago: float) -> Job:
    job = started_job(node, command=["true"])
    agent_launch(job_id=job.pk, attempt=job.attempt)

    def done() -> Job | None:
        agent_node_poll(node_id=node.pk)
        current = Job.objects.get(pk=job.pk)
        return current if current.state == JobState.SUCCEEDED else None

    wait_for(done)
    when = timezone.now() - timedelta(days=released_days_ago)
    Allocation.objects.filter(job_id=job.pk).update(
        started_at=when, ended_at=when, released_at=when
    )
    return Job.objects.get(pk=job.pk)


def test_the_poll_removes_only_attempts_finished_longer_ago_than_the_keep_time(
    ssh_node: Node, ssh_settings: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    old = _finished(ssh_node, released_days_ago=8)
    recent = _finished(ssh_node, released_days_ago=6)
    deleted = _finished(ssh_node, released_days_ago=1)
    Job.objects.filter(pk=deleted.pk).delete()  # an admin deleted it, allocations and all
    running = started_job(ssh_node, command=["sleep", "30"])
    agent_launch(job_id=running.pk, attempt=running.attempt)

    removed = agent_node_prune(node_id=ssh_node.pk)

    assert removed == sorted([(old.pk, 1), (deleted.pk, 1)])
    left = sorted(path.name for path in ssh_settings.iterdir())
    assert left == sorted([f"gpulab-{recent.pk}-1", f"gpulab-{running.pk}-1"])
    assert group_alive(int((ssh_settings / f"gpulab-{running.pk}-1" / "pid").read_text()))
    assert agent_node_prune(node_id=ssh_node.pk) == []  # nothing left to remove


def test_a_keep_time_of_zero_removes_nothing(ssh_node: Node, ssh_settings: Path, settings) -> None:  # type: ignore[no-untyped-def]
    old = _finished(ssh_node, released_days_ago=400)
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 0

    assert agent_node_prune(node_id=ssh_node.pk) == []
    assert nodes_to_prune() == []
    assert (ssh_settings / f"gpulab-{old.pk}-1" / "exit_code").exists()


def test_a_run_directory_whose_process_still_runs_is_kept_even_if_the_database_says_old(
    tmp_path: Path,
) -> None:
    # The node checks again: a wrong row costs no running job.
    alive = tmp_path / "gpulab-1-1"
    done = tmp_path / "gpulab-2-1"
    alive.mkdir()
    done.mkdir()
    (done / "exit_code").write_text("0\n")
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        (alive / "pid").write_text(f"{sleeper.pid}\n")
        script = remove_attempts_script(str(tmp_path), ["gpulab-1-1", "gpulab-2-1"], docker=False)
        subprocess.run(["sh", "-c", script], check=True)
        assert sorted(path.name for path in tmp_path.iterdir()) == ["gpulab-1-1"]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_only_attempt_names_reach_the_removal_script() -> None:
    with pytest.raises(ValueError, match="not an attempt name"):
        remove_attempts_script("/runs", ["gpulab-1-1", "../../etc"], docker=False)
    assert remove_attempts_script("/runs", [], docker=True) == "true"


FAKE_DOCKER = """#!/bin/sh
# Containers are files in $STATE/containers, their content the state. Like Docker, `rm`
# without -f refuses a running container and goes on with the others.
last() { for a in "$@"; do n=$a; done; }
case "$1" in
  ps) [ -e "$STATE/daemon-down" ] && { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
      case "$*" in *status=exited*) stopped=1 ;; *) stopped= ;; esac
      for f in "$STATE"/containers/*; do
        [ -n "$stopped" ] && [ "$(cat "$f")" = running ] && continue; basename "$f"; done ;;
  rm) shift; status=0; for n in "$@"; do f="$STATE/containers/$n"
        if [ ! -e "$f" ]; then echo "No such container: $n" >&2; status=1
        elif [ "$(cat "$f")" = running ]; then echo "cannot remove running $n" >&2; status=1
        else rm "$f"; fi; done; exit $status ;;
  container) last "$@"; [ -e "$STATE/containers/$n" ] ;;
esac
"""


@pytest.fixture
def fake_docker(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "bin" / "docker").chmod(0o755)
    (tmp_path / "containers").mkdir()
    (tmp_path / "runs").mkdir()
    return {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "STATE": str(tmp_path)}


def test_a_docker_node_lists_its_stopped_containers_and_stop_markers_and_removes_both(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    containers, runs = tmp_path / "containers", tmp_path / "runs"
    (containers / "gpulab-1-1").write_text("exited")
    (containers / "gpulab-2-1").write_text("running")
    (containers / "gpulab-3-2").write_text("exited")
    (runs / "gpulab-1-1").mkdir()  # the stop marker of a preempted attempt
    (runs / "gpulab-2-1").mkdir()
    (runs / "gpulab-4-1").mkdir()  # its container is gone already

    def sh(script: str) -> str:
        done = subprocess.run(
            ["sh", "-c", script], env=fake_docker, capture_output=True, text=True, check=True
        )
        return done.stdout

    listed = sh(kept_attempts_script(str(runs), docker=True)).split()
    assert sorted(set(listed)) == ["gpulab-1-1", "gpulab-2-1", "gpulab-3-2", "gpulab-4-1"]

    sh(remove_attempts_script(str(runs), ["gpulab-1-1", "gpulab-2-1", "gpulab-4-1"], docker=True))

    assert sorted(path.name for path in containers.iterdir()) == ["gpulab-2-1", "gpulab-3-2"]
    assert sorted(path.name for path in runs.iterdir()) == ["gpulab-2-1"]


def test_a_docker_node_whose_daemon_cannot_list_keeps_every_run_directory(
    fake_docker: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "daemon-down").touch()
    (tmp_path / "containers" / "gpulab-2-1").write_text("running")
    (tmp_path / "runs" / "gpulab-2-1").mkdir()

    script = remove_attempts_script(str(tmp_path / "runs"), ["gpulab-2-1"], docker=True)
    subprocess.run(["sh", "-c", script], env=fake_docker, check=True)

    assert (tmp_path / "runs" / "gpulab-2-1").exists()


def test_a_directory_that_only_looks_like_an_attempt_is_ignored(
    ssh_node: Node, ssh_settings: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    # A job running as the SSH user can make anything in the run root; "²" is a digit to
    # str.isdigit but not to int().
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    old = _finished(ssh_node, released_days_ago=8)
    (ssh_settings / "gpulab-\u00b2-1").mkdir()

    assert agent_node_prune(node_id=ssh_node.pk) == [(old.pk, 1)]
    assert (ssh_settings / "gpulab-\u00b2-1").exists()


def test_a_removed_log_without_a_kept_copy_is_said_so_on_the_page_and_is_410_in_the_api(
    ssh_node: Node, ssh_settings: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    job = _finished(ssh_node, released_days_ago=8)
    assert agent_node_prune(node_id=ssh_node.pk) == [(job.pk, 1)]
    assert not (ssh_settings / f"gpulab-{job.pk}-1").exists()
    # As an attempt removed before logs were copied into the database.
    AttemptLog.objects.filter(job=job).delete()

    log = job_log_tail(job=job, stream="stdout")
    assert log.removed
    assert log.problem == (
        "This attempt ended more than 7 days ago, so its log has been removed from sshnode "
        "(finished attempts are kept 7 days)."
    )
    client = APIClient()
    client.force_authenticate(job.owner)
    response = client.get(f"/api/v1/agents/jobs/{job.pk}/logs/")
    assert response.status_code == 410
    assert response.json()["code"] == "logs_removed"


def test_a_log_still_kept_is_read_from_the_node(ssh_node: Node, settings) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 7
    job = _finished(ssh_node, released_days_ago=6)

    log = job_log_tail(job=job, stream="stdout")

    assert not log.removed and log.problem == ""


def test_the_clean_up_is_scheduled_hourly_on_the_ssh_queue() -> None:
    app.loader.import_default_modules()
    entries = [e for e in app.conf.beat_schedule.values() if e["task"] == "agents.prune_all"]
    # Every hour at :30, not every 3600 s from beat's start, which each redeploy restarts.
    assert [entry["schedule"] for entry in entries] == [crontab(minute=30)]
    assert {"agents.prune_all", "agents.node_prune"} <= set(app.tasks)
    assert task_route("agents.node_prune", (), {}, {}) == {"queue": queue_name(SSH_QUEUE)}
