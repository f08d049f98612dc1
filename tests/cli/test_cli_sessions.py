"""Interactive sessions on the command line: `submit --interactive`, the address and the
tunnel in `show` (the token only when the API gave it: the owner's), the mark in `jobs`."""

from __future__ import annotations

from typing import Any

import pytest

from cli.__main__ import main
from cli.client import Client
from cli.render import session_fields
from jobs.choices import JobState
from jobs.models import Job
from tests.cli.conftest import Terminal
from tests.dashboard.helpers import device, hold
from tests.factories import JobFactory

live = pytest.mark.django_db(transaction=True)
TOKEN = "s3cret-Token_value"
RUNNING = {
    "id": 7,
    "name": "notebook",
    "owner": "alice",
    "group": None,
    "state": "RUNNING",
    "image": "jupyter/base-notebook",
    "command": ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"],
    "num_gpus": 1,
    "accepted_types": [],
    "walltime_seconds": 4 * 3600,
    "run_seconds": 60,
    "attained_gpu_hours": 0.1,
    "attempt": 1,
    "preemption_count": 0,
    "submitted_at": "2026-11-24T11:00:00Z",
    "started_at": "2026-11-24T11:01:00Z",
    "interactive": True,
    "session": {
        "node": "node-a",
        "port": 30001,
        "url": "http://node-a:30001/",
        "tunnel": "",
        "token": TOKEN,
    },
}


def show_output(payload: dict, monkeypatch: pytest.MonkeyPatch) -> str:
    """`gpulab show` printing `payload` as the API's answer."""
    monkeypatch.setenv("GPULAB_URL", "http://gpulab.invalid")
    monkeypatch.setenv("GPULAB_TOKEN", "api-token")
    monkeypatch.setattr(Client, "job", lambda self, job_id: payload)
    out = Terminal()
    assert main(["show", str(payload["id"])], out=out) == 0
    return out.getvalue()


# --------------------------------------------------------------------------- fixed payloads


def test_show_prints_the_owners_link_with_the_token(monkeypatch):
    out = show_output(RUNNING, monkeypatch)

    assert f"  session    http://node-a:30001/?token={TOKEN}\n" in out
    assert "  node       node-a\n" in out
    assert "tunnel" not in out


def test_show_never_prints_a_token_the_api_did_not_give(monkeypatch):
    payload = {**RUNNING, "session": {**RUNNING["session"], "token": None}}

    out = show_output(payload, monkeypatch)

    assert "  session    http://node-a:30001/\n" in out
    assert "token" not in out


def test_show_prints_the_tunnel_through_the_gateway(monkeypatch):
    tunnel = "ssh -N -L 30001:10.0.0.5:30001 login.lab.example"
    session = {**RUNNING["session"], "url": "http://localhost:30001/", "tunnel": tunnel}

    out = show_output({**RUNNING, "session": session}, monkeypatch)

    assert f"  session    http://localhost:30001/?token={TOKEN}\n" in out
    assert f"  tunnel     {tunnel}\n" in out


def test_the_servers_session_text_cannot_drive_the_terminal(monkeypatch):
    session = {**RUNNING["session"], "node": "a0\x1b[2J", "tunnel": "ssh\rforged"}

    out = show_output({**RUNNING, "session": session}, monkeypatch)

    assert "\x1b" not in out and "\r" not in out
    assert "a0\\x1b[2J" in out and "ssh\\x0dforged" in out


@pytest.mark.parametrize(
    ("job", "fields"),
    [
        ({"interactive": False, "session": None}, []),
        (
            {"interactive": True, "state": "PENDING", "session": None},
            [("session", "no address yet: it appears once the session runs")],
        ),
        ({"interactive": True, "state": "CANCELLED", "session": None}, [("session", "ended")]),
        (
            {"interactive": True, "session": {"url": "http://n:1/?a=b", "node": "n", "token": "t"}},
            [("session", "http://n:1/?a=b&token=t"), ("node", "n")],
        ),
    ],
)
def test_session_fields(job, fields):
    assert session_fields(job) == fields


# --------------------------------------------------------------------------- live server


@live
def test_submit_interactive_makes_a_session(small_cluster, owner, as_user):
    status, out = as_user(owner)(
        "submit", "--interactive", "jupyter/base-notebook", "--", "jupyter", "lab", "--no-browser"
    )

    assert status == 0
    job = Job.objects.get()
    assert job.interactive and job.walltime_seconds == 4 * 3600
    assert job.command == ["jupyter", "lab", "--no-browser"]
    assert f"`gpulab show {job.pk}` says where to open it" in out


@live
def test_a_refused_session_names_the_option(small_cluster, owner, as_user, capsys):
    status, _ = as_user(owner)("submit", "--interactive", "--time", "13h", "img:1", "--", "sh")

    assert status == 1
    assert "--time (walltime_seconds): A session runs at most 12 h" in capsys.readouterr().err
    assert not Job.objects.exists()


def _running_session(owner: Any, small_cluster: Any) -> Job:
    job = hold(owner, [device(small_cluster, "a0", 0)])
    Job.objects.filter(pk=job.pk).update(
        interactive=True, session_port=30005, session_token=TOKEN, walltime_seconds=3600
    )
    return job


@live
def test_show_gives_the_owner_the_address_and_an_admin_no_token(
    small_cluster,
    owner,
    lab_admin,
    as_user,
):
    job = _running_session(owner, small_cluster)

    _, mine = as_user(owner)("show", str(job.pk))
    _, admins = as_user(lab_admin)("show", str(job.pk))

    assert f"  session    http://127.0.0.1:30005/?token={TOKEN}\n" in mine
    assert "  session    http://127.0.0.1:30005/\n" in admins
    assert TOKEN not in admins


@live
def test_jobs_marks_sessions(small_cluster, owner, as_user):
    notebook = _running_session(owner, small_cluster)
    Job.objects.filter(pk=notebook.pk).update(name="notebook")
    JobFactory(owner=owner, name="train", state=JobState.PENDING)

    _, out = as_user(owner)("jobs")

    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows[str(notebook.pk)].split()[1:4] == ["notebook", "(session)", "alice"]
    assert [line for line in rows.values() if "(session)" in line] == [rows[str(notebook.pk)]]
