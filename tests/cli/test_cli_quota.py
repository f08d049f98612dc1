"""`gpulab quota`: the caller's quotas as a table (Slurm's sshare), its renderer on a fixed
answer, and the command against the real app over HTTP."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from accounts.models import DeviceTypeQuota, LabGroup
from cli.__main__ import cmd_quota
from cli.render import QUOTA_HEADERS, quota_rows, table
from cluster.models import DeviceType
from jobs.choices import JobState
from tests.cli.conftest import Terminal
from tests.dashboard.helpers import device, hold
from tests.factories import JobFactory

ANSWER = [
    {
        "kind": "user",
        "name": "alice",
        "weight": 1.0,
        "gpus_in_use": 3,
        "max_gpus": 8,
        "guaranteed_gpus": None,
        "borrowed_gpus": None,
        "running_jobs": 2,
        "max_running_jobs": 2,
        "pending_jobs": 1,
        "max_pending_jobs": None,
        "device_types": [
            {"device_type": "a100", "gpus_in_use": 2, "max_gpus": 2, "at_limit": True},
            {"device_type": "v100", "gpus_in_use": 1, "max_gpus": 4, "at_limit": False},
        ],
        "at_limit": ["max_running_jobs", "max_gpus[a100]"],
    },
    {
        "kind": "group",
        "name": "vision",
        "weight": 2.0,
        "gpus_in_use": 5,
        "max_gpus": None,
        "guaranteed_gpus": 4,
        "borrowed_gpus": 1,
        "running_jobs": 3,
        "max_running_jobs": None,
        "pending_jobs": 0,
        "max_pending_jobs": 10,
        "device_types": [],
        "at_limit": [],
    },
]


def test_the_table_shows_used_against_limit_per_account() -> None:
    assert table(QUOTA_HEADERS, quota_rows(ANSWER)) == "\n".join(
        [
            "KIND   NAME    GPUS  GUARANTEED  BORROWED  RUNNING  PENDING  TYPES"
            "               LIMITS",
            "user   alice   3/8   -           -         2/2      1/-      a100 2/2, v100 1/4"
            "  AT LIMIT: max_running_jobs, max_gpus[a100]",
            "group  vision  5/-   4           1         3/-      0/10     -                   -",
        ]
    )


def test_a_table_of_no_accounts_is_its_header() -> None:
    assert quota_rows([]) == []


class Answering:
    """A client that answers `quotas()` with a fixed list."""

    def quotas(self) -> list[dict]:
        return ANSWER


def test_the_command_prints_that_table_or_the_json() -> None:
    out = Terminal()
    assert cmd_quota(argparse.Namespace(json=False), Answering(), out) == 0  # type: ignore[arg-type]
    assert out.getvalue() == table(QUOTA_HEADERS, quota_rows(ANSWER)) + "\n"
    out = Terminal()
    assert cmd_quota(argparse.Namespace(json=True), Answering(), out) == 0  # type: ignore[arg-type]
    assert json.loads(out.getvalue()) == ANSWER


# ------------------------------------------------------------------ against the server


def _cells(line: str) -> list[str]:
    """A table line's cells: the table puts two spaces or more between them, one within."""
    return re.split(r" {2,}", line)


@pytest.fixture
def usage(owner, teammate, outsider, vision, nlp, small_cluster):  # type: ignore[no-untyped-def]
    """alice (2 GPUs max, a100 cap 2) runs 2 a100 in vision and waits with one job; bob
    runs 1 v100 in vision (guaranteed 2); carol runs 1 in nlp."""
    owner.max_gpus = 2
    owner.save()
    vision.max_gpus, vision.guaranteed_gpus = 6, 2
    vision.save()
    DeviceTypeQuota.objects.create(
        user=owner, device_type=DeviceType.objects.get(name="a100"), max_gpus=2
    )
    hold(owner, [device(small_cluster, "a0", 0), device(small_cluster, "a0", 1)], group=vision)
    JobFactory(owner=owner, group=vision, num_gpus=2)
    hold(teammate, [device(small_cluster, "v0", 0)], group=vision, state=JobState.STARTING)
    hold(outsider, [device(small_cluster, "v0", 1)], group=nlp)


@pytest.mark.django_db(transaction=True)
def test_quota_prints_the_caller_s_own_account_and_groups(usage, owner, as_user) -> None:  # type: ignore[no-untyped-def]
    status, out = as_user(owner)("quota")

    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == QUOTA_HEADERS
    assert [_cells(line) for line in lines[1:]] == [
        ["user", "alice", "2/2", "-", "-", "1/-", "1/-", "a100 2/2",
         "AT LIMIT: max_gpus, max_gpus[a100]"],
        ["group", "vision", "3/6", "2", "1", "2/-", "1/-", "-", "-"],
    ]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_quota_never_shows_another_user_s_numbers(
    usage, owner, outsider, lab_admin, as_user
) -> None:  # type: ignore[no-untyped-def]
    _, theirs = as_user(outsider)("quota")
    assert [_cells(line)[:3] for line in theirs.splitlines()[1:]] == [
        ["user", "carol", "1/-"],
        ["group", "nlp", "1/-"],
    ]
    assert "alice" not in theirs and "vision" not in theirs
    _, admins = as_user(lab_admin)("quota")
    assert [_cells(line)[:2] for line in admins.splitlines()[1:]] == [["user", "root"]]


@pytest.mark.django_db(transaction=True)
def test_quota_json_is_the_api_s_answer(usage, owner, as_user, api_as) -> None:  # type: ignore[no-untyped-def]
    status, out = as_user(owner)("quota", "--json")

    assert status == 0
    assert json.loads(out) == api_as(owner).get("/api/v1/quotas/").json()["accounts"]
    assert [account["name"] for account in json.loads(out)] == ["alice", "vision"]


@pytest.mark.django_db(transaction=True)
def test_a_group_name_cannot_write_to_the_terminal(owner, as_user) -> None:  # type: ignore[no-untyped-def]
    # Names are slugs, but an admin's shell can store anything; the table shows it inert.
    LabGroup.objects.create(name="evil\x1b[2J").members.add(owner)
    _, out = as_user(owner)("quota")
    assert "\x1b" not in out and "evil\\x1b[2J" in out
