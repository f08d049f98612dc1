"""What the command line prints and parses, exactly: pure functions, no server."""

from __future__ import annotations

import argparse
import ast
import io
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.__main__ import _array, _dependency, cmd_logs, patiently, shown, watch
from cli.client import NOT_THE_API, ApiError, error_message
from cli.render import (
    duration,
    job_status_line,
    log_new_part,
    progress_bar,
    start_estimate,
    table,
    walltime_seconds,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 5400),  # Slurm: a bare number is minutes
        ("5:30", 330),  # MM:SS
        ("1:30:00", 5400),  # HH:MM:SS
        ("2-12", 216000),  # D-HH
        ("1-02:30", 95400),  # D-HH:MM
        ("1-00:00:10", 86410),  # D-HH:MM:SS
        ("45s", 45),
        ("2h30m", 9000),
        ("1d", 86400),
    ],
)
def test_walltimes_are_read_as_slurm_reads_them(text: str, seconds: int) -> None:
    assert walltime_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1.5", "2x", "-3", "1:2:3:4", "a-01", "1-", "h2"])
def test_a_walltime_that_is_none_of_those_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        walltime_seconds(text)


def test_durations_show_the_two_largest_units() -> None:
    assert [duration(s) for s in (0, 45, 725, 11220, 187200, -5)] == [
        "0s", "45s", "12m05s", "3h07m", "2d04h", "0s",
    ]  # fmt: skip


def test_the_progress_bar_is_clamped_and_sized() -> None:
    assert progress_bar(0.375, width=8) == "[###-----]  38%"
    assert progress_bar(2.0, width=4) == "[####] 100%"
    assert progress_bar(-1, width=4) == "[----]   0%"


def test_a_table_pads_columns_and_cuts_the_last_to_the_width() -> None:
    text = table(["ID", "REASON"], [["7", "Behind: 3 jobs in queue 0"], ["12", "ok"]], width=16)
    assert text.splitlines() == ["ID  REASON", "7   Behind: 3 j…", "12  ok"]


def _job(**fields: object) -> dict:
    return {"id": 5, "state": "PENDING", "reason": "", **fields}


def test_the_status_line_says_where_a_job_is() -> None:
    submitted = (NOW - timedelta(minutes=5, seconds=3)).isoformat()
    started = (NOW - timedelta(minutes=30)).isoformat()
    pending = _job(queue_position=3, submitted_at=submitted, reason="Behind: 2 jobs")
    assert job_status_line(pending, NOW) == (
        "job 5 PENDING, position 3 in the queue, waiting 5m03s: Behind: 2 jobs"
    )
    running = _job(state="RUNNING", started_at=started, walltime_seconds=3600)
    assert job_status_line(running, NOW) == (
        "job 5 RUNNING [############------------]  50% 30m00s of 1h00m"
    )
    assert job_status_line(_job(state="RUNNING", started_at=started), NOW) == (
        "job 5 RUNNING for 30m00s"
    )
    failed = _job(state="FAILED", exit_code=2, reason="Exited with 2.")
    assert job_status_line(failed, NOW) == "job 5 FAILED (exit 2): Exited with 2."


def test_a_pending_job_says_when_it_is_expected_to_start() -> None:
    submitted = (NOW - timedelta(minutes=5)).isoformat()
    estimate = {
        "at": (NOW + timedelta(minutes=35)).isoformat(),
        "earliest": (NOW + timedelta(minutes=20)).isoformat(),
        "latest": (NOW + timedelta(hours=1, minutes=10)).isoformat(),
        "made_at": NOW.isoformat(),
        "note": "",
    }
    pending = _job(queue_position=3, submitted_at=submitted, estimated_start=estimate)
    assert job_status_line(pending, NOW) == (
        "job 5 PENDING, position 3 in the queue, waiting 5m00s; "
        "starts in about 35m00s (likely in about 20m00s to about 1h10m)"
    )
    behind = {**pending, "reason": "Behind: 2 jobs"}
    assert job_status_line(behind, NOW).endswith(
        "waiting 5m00s: Behind: 2 jobs; starts in about 35m00s "
        "(likely in about 20m00s to about 1h10m)"
    )
    # Not measured yet: no range. No estimate: the server's note, in `show` only.
    unmeasured = {**estimate, "earliest": None, "latest": None}
    assert start_estimate(_job(estimated_start=unmeasured), NOW) == "starts in about 35m00s"
    # Made a minute ago for a moment already past: now, never "in about 0s".
    past = {**estimate, "at": (NOW - timedelta(seconds=20)).isoformat()}
    assert start_estimate(_job(estimated_start=past), NOW).startswith("starts now (likely in")
    early = {**estimate, "earliest": (NOW - timedelta(minutes=1)).isoformat()}
    assert start_estimate(_job(estimated_start=early), NOW) == (
        "starts in about 35m00s (likely now to about 1h10m)"
    )
    none = {**estimate, "at": None, "note": "no estimate while it is held (see its reason)"}
    held = _job(submitted_at=submitted, estimated_start=none, reason="Dependency: waits")
    assert start_estimate(held, NOW) == "no estimate while it is held (see its reason)"
    assert job_status_line(held, NOW) == (
        "job 5 PENDING, in the queue, waiting 5m00s: Dependency: waits"
    )
    assert start_estimate(_job(estimated_start=None), NOW) is None


def test_a_log_read_again_adds_only_what_is_new() -> None:
    assert log_new_part("", "a\nb\n") == "a\nb\n"
    assert log_new_part("a\nb\n", "a\nb\nc\n") == "c\n"
    assert log_new_part("a\nb\n", "a\nb\n") == ""
    # The tail window slid: the start of the old read is gone from the new one.
    before = "".join(f"line {n}\n" for n in range(100))
    assert log_new_part(before, before[70:] + "line 100\n") == "line 100\n"
    # Repeated output: what precedes the anchor must be the end of the previous read too.
    assert log_new_part("." * 300, "." * 300 + "done\n") == "done\n"
    # More was written than one read holds: everything read is new.
    assert log_new_part("a\nb\n", "q\nr\n") == "q\nr\n"


def test_api_errors_become_one_line_naming_the_field() -> None:
    assert error_message({"detail": "Not found.", "code": "not_found"}) == (
        "Not found.",
        "not_found",
    )
    assert error_message({"num_gpus": ["Must be 1 or more."], "image": ["Required."]}) == (
        "num_gpus: Must be 1 or more.; image: Required.",
        "invalid",
    )
    assert error_message({"env": {"bad name": ["Not a variable name."]}})[0] == (
        "env: bad name: Not a variable name."
    )


def test_the_client_runs_on_python_3_9() -> None:
    # Login nodes and laptops: nothing newer than 3.9's grammar (no match, no except*).
    for path in Path("cli").glob("*.py"):
        ast.parse(path.read_text(), feature_version=(3, 9))


class FollowedJob:
    """A client whose job prints a line per read, ends after three, and whose node once
    cannot be read (503)."""

    def __init__(self) -> None:
        self.reads = 0

    def logs(self, job_id: int, stream: str) -> dict:
        self.reads += 1
        if self.reads == 2:
            raise ApiError(503, "The log cannot be read from node n1 right now.")
        return {"text": "".join(f"step {n}\n" for n in range(self.reads))}

    def job(self, job_id: int) -> dict:
        return {"id": 1, "owner": "alice", "state": "SUCCEEDED" if self.reads >= 4 else "RUNNING"}

    def username(self) -> str:
        return "alice"


def test_following_a_log_prints_each_line_once_through_an_unreadable_moment() -> None:
    out = io.StringIO()
    args = argparse.Namespace(job=1, stderr=False, follow=True, interval=0)

    assert cmd_logs(args, FollowedJob(), out) == 0  # type: ignore[arg-type]

    assert out.getvalue() == "step 0\nstep 1\nstep 2\nstep 3\nstep 4\n"


def test_the_client_imports_only_the_standard_library() -> None:
    # `pip install ./cli` declares no dependencies: anything else would fail on import.
    for path in Path("cli").glob("*.py"):
        tree = ast.parse(path.read_text())
        roots = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        roots |= {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and not node.level
        }
        assert roots <= set(sys.stdlib_module_names), (
            f"{path.name}: {roots - set(sys.stdlib_module_names)}"
        )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("afterok:12:13", ("afterok", [12, 13])),
        ("afterany:7", ("afterany", [7])),
        ("12", ("afterok", [12])),
        ("afterok:12,13", ("afterok", [12, 13])),
    ],
)
def test_dependencies_are_read_as_slurm_writes_them(text: str, parsed: tuple) -> None:
    assert _dependency(text) == parsed


@pytest.mark.parametrize("text", ["afternotok:1", "afterok:", "afterok:x", "", "singleton"])
def test_a_dependency_that_is_none_of_those_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _dependency(text)


def test_arrays_are_read_as_slurm_counts_them() -> None:
    assert (_array("10"), _array("10%2")) == ((10, None), (10, 2))
    for text in ("", "%2", "10%", "1-5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _array(text)


def test_the_walltime_bar_counts_every_attempt() -> None:
    started = (NOW - timedelta(seconds=10)).isoformat()
    job = _job(state="RUNNING", started_at=started, walltime_seconds=120, run_seconds=90)
    assert job_status_line(job, NOW) == (
        "job 5 RUNNING [##################------]  75% 1m30s of 2m00s"
    )


def test_following_rides_out_a_server_that_is_away_and_says_so_once() -> None:
    answers = [ApiError(502, "Bad Gateway"), ApiError(0, "cannot reach"), {"state": "RUNNING"}]

    def call() -> dict:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    err = io.StringIO()
    assert patiently(call, sleep=lambda _: None, err=err) == {"state": "RUNNING"}
    assert err.getvalue() == (
        "gpulab: Bad Gateway; trying again\ngpulab: the server answers again\n"
    )
    with pytest.raises(ApiError):  # an answer about the job is not retried
        patiently(lambda: (_ for _ in ()).throw(ApiError(404, "Not found.")), err=err)


@pytest.mark.django_db
def test_the_tokens_page_says_how_to_log_the_command_line_in(owner, client) -> None:  # type: ignore[no-untyped-def]
    client.force_login(owner)

    page = client.get("/account/tokens/").content.decode()

    assert "gpulab login --url http://testserver" in page


class Unreachable:
    calls = 0

    def job(self, job_id: int) -> dict:
        self.calls += 1
        raise ApiError(0, "cannot reach http://127.0.0.1:1: Connection refused")


def test_wait_on_a_server_that_never_answered_fails_at_once() -> None:
    client = Unreachable()
    with pytest.raises(ApiError):
        watch(client, 5, out=io.StringIO(), sleep=lambda _: None)  # type: ignore[arg-type]
    assert client.calls == 1


def test_an_answer_that_is_not_the_api_is_not_retried() -> None:
    def call() -> dict:
        raise ApiError(NOT_THE_API, "answered with something other than the gpulab API")

    with pytest.raises(ApiError):
        patiently(call, sleep=lambda _: pytest.fail("retried"), err=io.StringIO())


def test_direction_overrides_are_made_visible_too() -> None:
    assert shown("a\u202eZ\u2028b\x85") == "a\\u202eZ\\u2028b\\x85"
