"""`gpulab logs`: the owner's log as written, anyone else's made inert; `-f` waits for a
job that has not started and rides out a first read the server cannot answer."""

from __future__ import annotations

import argparse
import io
from typing import Any

import pytest
from django.utils import timezone

from accounts.services import api_token_create
from agents.models import AttemptLog
from cli.__main__ import cmd_logs
from cli.client import ApiError, Client
from jobs.choices import JobState
from jobs.models import Allocation, Job
from tests.cli.conftest import Terminal
from tests.factories import JobFactory

live = pytest.mark.django_db(transaction=True)

FORGING = "ok\x1b]0;pwned\x07\x1b[2J\rforged\n\tindented\n"
INERT = "ok\\x1b]0;pwned\\x07\\x1b[2J\\x0dforged\n\tindented\n"


def _ended_with_log(owner: Any, small_cluster: Any, stdout: str, **fields: Any) -> Job:
    job = JobFactory(owner=owner, state=JobState.SUCCEEDED, attempt=1, **fields)
    now = timezone.now()
    Allocation.objects.create(
        job=job, attempt=1, device=small_cluster[0], started_at=now, ended_at=now, released_at=now
    )
    AttemptLog.objects.create(job=job, attempt=1, stdout=stdout, stderr="", archived_at=now)
    return job


@live
def test_an_admin_reading_a_students_log_sees_its_escapes_made_visible(
    owner, lab_admin, small_cluster, as_user
) -> None:  # type: ignore[no-untyped-def]
    job = _ended_with_log(owner, small_cluster, FORGING)
    admin = as_user(lab_admin)

    assert admin("logs", str(job.pk)) == (0, INERT)
    assert admin("logs", "-f", str(job.pk)) == (0, INERT)


@live
def test_a_coordinator_reading_a_members_log_sees_its_escapes_made_visible(
    owner, teammate, vision, small_cluster, as_user
) -> None:  # type: ignore[no-untyped-def]
    vision.coordinators.add(teammate)
    job = _ended_with_log(owner, small_cluster, FORGING, group=vision)

    assert as_user(teammate)("logs", str(job.pk)) == (0, INERT)


@live
def test_the_owner_gets_their_own_log_as_written(owner, small_cluster, as_user) -> None:  # type: ignore[no-untyped-def]
    job = _ended_with_log(owner, small_cluster, FORGING)
    run = as_user(owner)

    assert run("logs", str(job.pk)) == (0, FORGING)
    assert run("logs", "-f", str(job.pk)) == (0, FORGING)


@live
def test_following_a_pending_job_waits_for_it_to_start_then_prints_its_log(
    owner, small_cluster, live_server
) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, state=JobState.PENDING, queue_position=1)
    node = small_cluster[0].node
    node.simulated = True  # a running attempt's log is read without SSH (and is empty)
    node.save()
    _, key = api_token_create(user=owner, name="logs")

    def start() -> None:
        now = timezone.now()
        Job.objects.filter(pk=job.pk).update(
            state=JobState.RUNNING, attempt=1, started_at=now, queue_position=None
        )
        Allocation.objects.create(job=job, attempt=1, device=small_cluster[0], started_at=now)

    def end() -> None:
        now = timezone.now()
        Allocation.objects.filter(job=job).update(ended_at=now, released_at=now)
        Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=now)
        AttemptLog.objects.create(
            job=job, attempt=1, stdout="epoch 1\nepoch 2\n", stderr="", archived_at=now
        )

    moves = iter([lambda: None, start, end])

    def sleep(_: float) -> None:
        next(moves, lambda: None)()

    out, err = Terminal(), io.StringIO()
    args = argparse.Namespace(job=job.pk, stderr=False, follow=True, interval=0)

    assert cmd_logs(args, Client(live_server.url, key), out, sleep=sleep, err=err) == 0

    assert out.getvalue() == "epoch 1\nepoch 2\n"
    assert err.getvalue() == f"gpulab: job {job.pk} has not started (PENDING); waiting for it\n"


@live
def test_without_follow_a_pending_job_still_has_no_logs(owner, as_user, capsys) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, state=JobState.PENDING)

    assert as_user(owner)("logs", str(job.pk)) == (1, "")
    assert "No logs yet: the job has not started." in capsys.readouterr().err


@live
def test_following_a_job_cancelled_before_it_started_does_not_wait(owner, live_server) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, state=JobState.CANCELLED)
    _, key = api_token_create(user=owner, name="logs")
    args = argparse.Namespace(job=job.pk, stderr=False, follow=True, interval=0)

    with pytest.raises(ApiError, match=r"No logs yet: the job has not started\."):
        cmd_logs(
            args, Client(live_server.url, key), Terminal(), sleep=lambda _: pytest.fail("waited")
        )


class AwayAtFirst:
    """A client whose server does not answer the first log read (a deploy), then does."""

    def __init__(self) -> None:
        self.reads = 0

    def username(self) -> str:
        return "alice"

    def job(self, job_id: int) -> dict:
        return {"id": job_id, "owner": "alice", "state": "SUCCEEDED"}

    def logs(self, job_id: int, stream: str) -> dict:
        self.reads += 1
        if self.reads == 1:
            raise ApiError(502, "Bad Gateway")
        return {"text": "done\n"}


def test_following_rides_out_a_first_read_the_server_cannot_answer() -> None:
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(job=1, stderr=False, follow=True, interval=0)

    assert cmd_logs(args, AwayAtFirst(), out, sleep=lambda _: None, err=err) == 0  # type: ignore[arg-type]

    assert out.getvalue() == "done\n"
    assert err.getvalue() == "gpulab: Bad Gateway; trying again\ngpulab: the server answers again\n"
    args.follow = False  # a single read reports it at once, as before
    with pytest.raises(ApiError):
        cmd_logs(args, AwayAtFirst(), out, sleep=lambda _: pytest.fail("retried"), err=err)  # type: ignore[arg-type]
