"""`gpulab submit`'s repeatable options: nothing typed is dropped without a word (a
repeated --env name, a second -d, --wait on an array)."""

from __future__ import annotations

import pytest

from cli.__main__ import main, parser_build
from cli.client import Client
from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of `gpulab ARGV`, which must be a usage error (exit 2) before any request."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.fixture
def no_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Client, "request", lambda *a, **k: pytest.fail("a request was sent"))


def test_an_env_name_given_twice_is_refused(no_requests, capsys) -> None:  # type: ignore[no-untyped-def]
    err = _refused(
        ["submit", "-e", "NAME=1", "-e", "OTHER=x", "-e", "NAME=2", "img:1", "true"], capsys
    )

    assert "gpulab submit: error: --env: NAME is given twice; give each variable once." in err


def test_repeated_dependencies_of_one_kind_add_up() -> None:
    args = parser_build().parse_args(
        ["submit", "-d", "afterany:4", "-d", "afterany:5:6", "img:1", "true"]
    )
    assert args.dependency == ("afterany", [4, 5, 6])
    args = parser_build().parse_args(["submit", "-d", "afterok:4", "-d", "5", "img:1", "true"])
    assert args.dependency == ("afterok", [4, 5])  # bare ids are afterok


def test_afterok_and_afterany_together_are_refused(no_requests, capsys) -> None:  # type: ignore[no-untyped-def]
    err = _refused(["submit", "-d", "afterok:4", "-d", "afterany:5", "img:1", "true"], capsys)

    assert "--dependency: afterok and afterany together" in err


def test_wait_on_an_array_is_refused_before_submitting(no_requests, capsys) -> None:  # type: ignore[no-untyped-def]
    err = _refused(["submit", "--array", "3", "--wait", "img:1", "--", "true"], capsys)

    assert "submit --wait follows a single job, not an array" in err
    assert "gpulab jobs --array ID" in err


@pytest.mark.django_db(transaction=True)
def test_every_dependency_and_variable_given_reaches_the_job(small_cluster, owner, as_user) -> None:  # type: ignore[no-untyped-def]
    first, second = (JobFactory(owner=owner, state=JobState.RUNNING) for _ in range(2))

    status, _ = as_user(owner)(
        "submit", "-d", f"afterok:{first.pk}", "-d", str(second.pk), "-e", "A=1", "-e", "B=2",
        "img:1", "--", "python", "eval.py",
    )  # fmt: skip

    assert status == 0
    job = Job.objects.exclude(pk__in=[first.pk, second.pk]).get()
    assert sorted(job.depends_on.values_list("pk", flat=True)) == [first.pk, second.pk]
    assert job.env == {"A": "1", "B": "2"}
