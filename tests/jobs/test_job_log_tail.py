"""The log window of the job page (agents.logs.job_log_tail with a line cap): lines as a
terminal shows them, and the partial first line dropped only from a log that was cut."""

from __future__ import annotations

from unittest import mock

import pytest
from django.utils import timezone

from agents.logs import job_log_tail
from agents.runtimes import LOG_TAIL_BYTES
from jobs.choices import JobState
from jobs.models import Allocation
from tests.factories import JobFactory


@pytest.fixture
def job(owner, small_cluster):  # type: ignore[no-untyped-def]
    now = timezone.now()
    running = JobFactory(owner=owner, state=JobState.RUNNING, attempt=1, started_at=now)
    Allocation.objects.create(job=running, attempt=1, device=small_cluster[0], started_at=now)
    return running


def tail(job, text: str, max_lines: int = 200):  # type: ignore[no-untyped-def]
    with mock.patch("agents.logs.agent_logs_tail", return_value=text):
        return job_log_tail(job=job, stream="stdout", max_lines=max_lines)


@pytest.mark.django_db
def test_a_short_log_of_binary_output_keeps_its_first_line(job):
    # 25,620 bytes on the node; decoded with errors="replace", 76,820 once encoded again.
    raw = b"ok first line\n" + bytes(range(128, 256)) * 200 + b"\nlast\n"
    log = tail(job, raw.decode(errors="replace"))
    assert log.text.startswith("ok first line\n")
    assert log.lines == 3


@pytest.mark.django_db
def test_a_cut_log_drops_its_partial_first_line(job):
    whole = "".join(f"line {i}\n" for i in range(20000)).encode()
    log = tail(job, whole[-LOG_TAIL_BYTES:].decode(), max_lines=10_000)
    first = log.text.split("\n")[0]
    assert first.startswith("line ") and whole.decode().count(f"\n{first}\n") == 1


@pytest.mark.django_db
def test_a_progress_bar_redrawn_with_carriage_returns_is_one_line(job):
    text = "start\n" + "".join(f"\r{i}%" for i in range(100)) + "\ndone\n"
    log = tail(job, text)
    assert log.text == "start\n99%\ndone"
    assert log.lines == 3


@pytest.mark.django_db
def test_crlf_line_ends_and_other_separators_do_not_blank_or_split_lines(job):
    log = tail(job, "one\r\ntwo\x0cstill two\r\nthree\r")
    assert log.text == "one\ntwo\x0cstill two\nthree"
    assert log.lines == 3


@pytest.mark.django_db
def test_the_window_keeps_the_last_lines(job):
    log = tail(job, "".join(f"{i}\n" for i in range(300)), max_lines=200)
    assert log.lines == 200 and log.text.split("\n")[0] == "100"
