"""The `gpulab` command line against the real app over HTTP (a live server on the test
database): what it sends is what the API stores, and what it shows is the caller's own."""

from __future__ import annotations

import io
import os
import stat
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.services import api_token_create
from agents.models import AttemptLog
from cli.__main__ import main, watch
from cli.client import Client
from jobs.choices import JobState
from jobs.models import Allocation, Job
from scheduler.models import StartForecast
from tests.cli.conftest import Terminal
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_stores_the_argv_exactly_and_the_options_as_the_api_takes_them(
    small_cluster, owner, as_user
) -> None:  # type: ignore[no-untyped-def]
    run = as_user(owner)
    argv = ["python", "-c", "print('a b')", "it's", "$HOME", "--lr", "0.1"]

    status, out = run(
        "submit", "--gpus", "2", "-t", "a100", "-t", "v100", "-e", "SEED=7", "--time",
        "1:30:00", "--retries", "2", "--name", "sweep", "pytorch/pytorch:2.4.0", "--", *argv,
    )  # fmt: skip

    assert status == 0
    job = Job.objects.get()
    assert out.startswith(f"Submitted job {job.pk}: job {job.pk} PENDING")
    assert job.command == argv  # no shell in between: quotes, $ and flags arrive as typed
    assert (job.owner, job.image, job.num_gpus, job.accepted_types) == (
        owner, "pytorch/pytorch:2.4.0", 2, ["a100", "v100"],
    )  # fmt: skip
    assert (job.env, job.walltime_seconds, job.max_retries, job.name) == (
        {"SEED": "7"}, 5400, 2, "sweep",
    )  # fmt: skip


def test_submit_with_a_dependency_and_show_it(small_cluster, owner, as_user) -> None:  # type: ignore[no-untyped-def]
    first = JobFactory(owner=owner, state=JobState.RUNNING)
    run = as_user(owner)

    status, _ = run("submit", "-d", f"afterok:{first.pk}", "img:1", "--", "python", "t.py")

    assert status == 0
    job = Job.objects.exclude(pk=first.pk).get()
    assert list(job.depends_on.values_list("pk", flat=True)) == [first.pk]
    assert f"  waits for  #{first.pk} to succeed" in run("show", str(job.pk))[1]


def test_an_array_is_submitted_listed_and_cancelled_as_one(small_cluster, owner, as_user) -> None:  # type: ignore[no-untyped-def]
    run = as_user(owner)

    status, out = run("submit", "--array", "3%1", "img:1", "--", "python", "sweep.py")

    first = Job.objects.get(array_index=0)
    assert status == 0
    assert out.startswith(f"Submitted array {first.array_id}: 3 jobs from {first.pk}")
    assert first.array.max_running == 1
    listed = run("jobs", "--array", str(first.array_id))[1].splitlines()[1:]
    assert [line.split()[:3] for line in listed] == [
        [str(pk), "python", f"sweep.py[{index}]"]
        for index, pk in enumerate(Job.objects.order_by("array_index").values_list("pk", flat=True))
    ]
    Job.objects.filter(pk=first.pk).update(state=JobState.SUCCEEDED)
    assert run("cancel", "--array", str(first.array_id))[0] == 0
    assert list(Job.objects.order_by("array_index").values_list("state", flat=True)) == [
        JobState.SUCCEEDED, JobState.CANCELLED, JobState.CANCELLED,
    ]  # fmt: skip


def test_a_refused_submission_names_the_field_and_stores_nothing(
    small_cluster, owner, as_user, capsys
) -> None:  # type: ignore[no-untyped-def]
    status, _ = as_user(owner)("submit", "--gpus", "0", "img:1", "--", "true")

    assert status == 1
    assert "--gpus (num_gpus): Must be at least 1." in capsys.readouterr().err
    assert not Job.objects.exists()


def test_jobs_lists_only_the_callers_own_and_an_admin_sees_all(
    owner, outsider, lab_admin, as_user
) -> None:  # type: ignore[no-untyped-def]
    mine = JobFactory(owner=owner, name="mine")
    theirs = JobFactory(owner=outsider, name="theirs")
    JobFactory(owner=owner, name="finished", state=JobState.SUCCEEDED)

    status, out = as_user(owner)("jobs")

    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "OWNER",
        "STATE",
        "GPUS",
        "TYPES",
        "POS",
        "TIME",
        "REASON",
    ]
    assert [line.split()[:4] for line in lines[1:]] == [[str(mine.pk), "mine", "alice", "PENDING"]]
    _, everything = as_user(owner)("jobs", "--all")
    assert "finished" in everything and "theirs" not in everything
    _, admin_view = as_user(lab_admin)("jobs")
    assert {str(mine.pk), str(theirs.pk)} <= {
        line.split()[0] for line in admin_view.splitlines()[1:]
    }


def test_jobs_start_lists_pending_jobs_soonest_first_with_their_estimate(
    owner, outsider, as_user
) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    later = JobFactory(owner=owner, name="later", queue_position=1)
    sooner = JobFactory(owner=owner, name="sooner", queue_position=2)
    unknown = JobFactory(owner=owner, name="unknown", queue_position=3)
    JobFactory(owner=owner, name="running", state=JobState.RUNNING)
    JobFactory(owner=outsider, name="theirs")
    for job, minutes in ((later, 90), (sooner, 20)):
        StartForecast.objects.create(
            job=job, made_at=now, start_at=now + timedelta(minutes=minutes, seconds=30)
        )
    StartForecast.objects.create(job=unknown, made_at=now, note="no estimate: held")

    status, out = as_user(owner)("jobs", "--start")

    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[7] == "START"
    names = [line.split()[1] for line in lines[1:]]
    assert names == ["sooner", "later", "unknown"]
    assert "in about 20m" in lines[1] and "in about 1h30m" in lines[2]
    assert lines[3].split()[7] == "-"


def test_jobs_start_finds_the_soonest_beyond_the_newest_page(owner, as_user, capsys) -> None:  # type: ignore[no-untyped-def]
    # 60 pending jobs, the oldest first in line and soonest to start: the API lists them
    # newest first, 50 to a page, and --start must still put the oldest first.
    now = timezone.now()
    jobs = [JobFactory(owner=owner, name=f"j{n:02d}", queue_position=n + 1) for n in range(60)]
    StartForecast.objects.bulk_create(
        StartForecast(job=job, made_at=now, start_at=now + timedelta(minutes=10 * (n + 1)))
        for n, job in enumerate(jobs)
    )
    status, out = as_user(owner)("jobs", "--start", "--limit", "5")
    assert status == 0
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["j00", "j01", "j02", "j03", "j04"]
    assert "5 of 60 shown (--limit)." in capsys.readouterr().err


def test_a_student_cannot_cancel_or_read_another_students_job(
    owner, outsider, as_user, capsys
) -> None:  # type: ignore[no-untyped-def]
    theirs = JobFactory(owner=outsider)
    mine = JobFactory(owner=owner)
    run = as_user(owner)

    assert run("cancel", str(theirs.pk), str(mine.pk))[0] == 1

    assert Job.objects.get(pk=theirs.pk).state == JobState.PENDING
    assert Job.objects.get(pk=mine.pk).state == JobState.CANCELLED
    assert f"job {theirs.pk}:" in capsys.readouterr().err
    assert run("show", str(theirs.pk))[0] == 1
    assert run("logs", str(theirs.pk))[0] == 1


def test_show_prints_the_command_so_it_can_be_pasted_and_the_history(
    small_cluster, owner, as_user
) -> None:  # type: ignore[no-untyped-def]
    run = as_user(owner)
    run("submit", "img:1", "--", "python", "-c", "print('a b')")
    job = Job.objects.get()

    status, out = run("show", str(job.pk))

    assert status == 0
    assert "  command    python -c 'print('\"'\"'a b'\"'\"')'" in out
    assert "history:" in out and "→ PENDING" in out


def test_logs_prints_an_ended_jobs_kept_log(owner, as_user, small_cluster) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, state=JobState.SUCCEEDED, attempt=1)
    now = timezone.now()
    Allocation.objects.create(
        job=job, attempt=1, device=small_cluster[0], started_at=now, ended_at=now, released_at=now
    )
    AttemptLog.objects.create(
        job=job, attempt=1, stdout="epoch 1\nepoch 2\n", stderr="warning\n", archived_at=now
    )
    run = as_user(owner)

    assert run("logs", str(job.pk)) == (0, "epoch 1\nepoch 2\n")
    assert run("logs", "--stderr", str(job.pk)) == (0, "warning\n")
    assert run("logs", "-f", str(job.pk)) == (0, "epoch 1\nepoch 2\n")  # ended: no waiting


def test_wait_follows_the_job_and_exits_with_its_exit_code(owner, live_server, as_user) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, state=JobState.PENDING, queue_position=2)
    _, key = api_token_create(user=owner, name="wait")
    moves = iter(
        [
            {"queue_position": 1},
            {"state": JobState.RUNNING, "started_at": timezone.now(), "queue_position": None},
            {"state": JobState.FAILED, "exit_code": 3, "finished_at": timezone.now()},
        ]
    )

    def sleep(_: float) -> None:
        Job.objects.filter(pk=job.pk).update(**next(moves))

    out = Terminal()
    status = watch(Client(live_server.url, key), job.pk, out=out, sleep=sleep)

    assert status == 3
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        f"job {job.pk} PENDING",
        f"job {job.pk} PENDING",
        f"job {job.pk} RUNNING for 0s",
        f"job {job.pk} FAILED (exit 3)",
    ]
    assert "position 2 in the queue" in lines[0] and "position 1 in the queue" in lines[1]


def test_wait_on_a_terminal_redraws_one_line(owner, live_server) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, state=JobState.SUCCEEDED)
    _, key = api_token_create(user=owner, name="wait")
    out = Terminal(tty=True)

    assert watch(Client(live_server.url, key), job.pk, out=out, sleep=lambda _: None) == 0
    assert out.getvalue() == f"\r\033[Kjob {job.pk} SUCCEEDED\n"


def test_login_checks_the_token_and_saves_it_readable_by_the_owner_only(
    owner, live_server, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPULAB_URL", raising=False)
    monkeypatch.delenv("GPULAB_TOKEN", raising=False)
    _, key = api_token_create(user=owner, name="login")
    saved = tmp_path / "gpulab" / "config.json"

    monkeypatch.setattr("sys.stdin", io.StringIO("not-a-token\n"))
    assert main(["--url", live_server.url, "login"], out=Terminal()) == 1
    assert "gpulab login" in capsys.readouterr().err  # 401, with what to do
    assert not saved.exists()

    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))
    assert main(["--url", live_server.url, "login"], out=Terminal()) == 0
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    JobFactory(owner=owner, name="from-saved-login")
    out = Terminal()
    assert main(["jobs"], out=out) == 0  # no GPULAB_URL or GPULAB_TOKEN: the saved ones
    assert "from-saved-login" in out.getvalue()


def test_login_takes_the_url_after_the_command_as_the_docs_write_it(
    owner, live_server, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPULAB_URL", raising=False)
    monkeypatch.delenv("GPULAB_TOKEN", raising=False)
    _, key = api_token_create(user=owner, name="login")
    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))

    assert main(["login", "--url", live_server.url + "/"], out=Terminal()) == 0
    assert main(["jobs", "--url", live_server.url], out=Terminal()) == 0  # slash or not


def test_the_saved_token_is_never_sent_to_another_server(
    owner, live_server, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPULAB_TOKEN", raising=False)
    _, key = api_token_create(user=owner, name="login")
    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))
    main(["login", "--url", live_server.url], out=Terminal())
    sent: list[str] = []
    monkeypatch.setattr(Client, "request", lambda self, *a, **k: sent.append(self.token))

    with pytest.raises(SystemExit, match="the saved token is for"):
        main(["--url", "http://127.0.0.1:9", "jobs"], out=Terminal())
    assert sent == []


def test_other_peoples_text_cannot_drive_the_readers_terminal(owner, lab_admin, as_user) -> None:  # type: ignore[no-untyped-def]
    JobFactory(owner=owner, name="evil\x1b]0;pwned\x07\x1b[31mRED\nforged row")

    _, out = as_user(lab_admin)("jobs")

    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;pwned\\x07\\x1b[31mRED\\x0aforged row" in out
    assert len(out.splitlines()) == 2  # the header and one row: no forged line


def test_jobs_says_when_the_limit_cut_the_list(owner, as_user, capsys) -> None:  # type: ignore[no-untyped-def]
    for _ in range(3):
        JobFactory(owner=owner)

    _, out = as_user(owner)("jobs", "--limit", "2")

    assert len(out.splitlines()) == 3
    assert "2 of 3 shown (--limit)." in capsys.readouterr().err


def test_an_option_after_the_image_is_refused_not_run(small_cluster, owner, as_user) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit, match="the command starts with '--gpus'"):
        as_user(owner)("submit", "img:1", "--gpus", "3", "python", "x.py")
    assert not Job.objects.exists()


def test_a_url_that_is_not_the_api_is_said_so(owner, as_user, live_server, capsys) -> None:  # type: ignore[no-untyped-def]
    run = as_user(owner)

    assert run("--url", live_server.url + "/gpulab", "jobs")[0] == 1
    assert "other than the gpulab API" in capsys.readouterr().err


def test_a_server_that_does_not_answer_is_said_so(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPULAB_TOKEN", "x")

    assert main(["--url", "http://127.0.0.1:9", "jobs"], out=Terminal()) == 1
    assert "cannot reach http://127.0.0.1:9" in capsys.readouterr().err


@pytest.mark.parametrize("other", [["--state", "RUNNING"], ["--all"]])
def test_jobs_start_refuses_a_state_filter_it_would_ignore(other, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "--start", *other])

    assert exited.value.code == 2
    assert "jobs --start lists pending jobs; it takes neither --state nor --all." in (
        capsys.readouterr().err
    )
