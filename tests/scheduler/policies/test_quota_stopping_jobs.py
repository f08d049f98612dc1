"""Quotas count what a job being stopped still holds (`Snapshot.stopping_jobs`).

A PREEMPTING job checkpoints during its grace period on GPUs it has not let go of yet; the
policy may not touch it, but until it exits those GPUs are its owner's and group's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.types import Account, PlacementKind, Quota, StoppingJob
from scheduler.policies import decide
from scheduler.policies.fairness import QuotaLedger
from tests.scheduler.builders import devices, held, pending, snapshot, started
from tests.scheduler.policies.test_fairness import QUOTA_CASES

MIXED = devices({"n1": ("a100", 4), "n2": ("v100", 4)})


def with_stopping(snap, *stopping: StoppingJob):  # type: ignore[no-untyped-def]
    busy = snap.busy_device_ids | {d for job in stopping for d in job.devices}
    return replace(snap, stopping_jobs=stopping, busy_device_ids=busy)


@pytest.mark.parametrize(
    ("users", "groups", "job_fields", "expected_hold"),
    QUOTA_CASES,
)
@pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])
@pytest.mark.parametrize("policy", ["las", "gittins", "fifo", "fifo-backfill"])
def test_a_job_being_stopped_counts_against_every_quota_of_its_owner(
    users: list[Account],
    groups: list[Account],
    job_fields: dict[str, object],
    expected_hold: str,
    placement: PlacementKind,
    policy: str,
) -> None:
    # Alice's job 1 is checkpointing on a100 #0 (not in snapshot.jobs); her new 2-GPU job
    # would exceed the limit while job 1 still holds that GPU, whatever the policy.
    group = job_fields.get("group")
    stopping = StoppingJob(id=1, user="alice", group=group, devices=(0,))  # type: ignore[arg-type]
    base = snapshot(
        [pending(2, 2, **job_fields)],
        MIXED,
        users=users,
        groups=groups,
        policy=policy,
        placement=placement,
    )
    decisions = decide(with_stopping(base, stopping))
    assert started(decisions) == {}
    assert held(decisions) == {2: expected_hold}


def test_without_the_stopping_job_the_same_job_starts() -> None:
    """The control: the limit, not the busy GPU, holds the job above."""
    users = [Account("alice", quota=Quota(max_gpus=2))]
    base = snapshot([pending(2, 2)], MIXED, users=users, busy=[0])
    assert 2 in started(decide(base))


def test_another_users_job_being_stopped_does_not_count_against_alice() -> None:
    users = [Account("alice", quota=Quota(max_gpus=2, max_running_jobs=1))]
    stopping = StoppingJob(id=1, user="bob", group=None, devices=(0, 1))
    decisions = decide(with_stopping(snapshot([pending(2, 2)], MIXED, users=users), stopping))
    assert 2 in started(decisions)


def test_the_ledger_tallies_a_stopping_job_per_account_and_type() -> None:
    users = [Account("alice", quota=Quota(max_gpus=4))]
    groups = [Account("vision", quota=Quota(max_gpus_by_type=(("v100", 2),)))]
    stopping = StoppingJob(id=1, user="alice", group="vision", devices=(0, 4))  # a100 + v100
    snap = with_stopping(snapshot([], MIXED, users=users, groups=groups), stopping)
    ledger = QuotaLedger(snap, running=())
    job = pending(2, 2, group="vision")
    # alice: 2 of 4 GPUs in use, so 2 more fit; vision: 1 of 2 v100s in use, so not 2 more.
    assert ledger.allowed_types(job, ("v100", "a100")) == (("a100",), None)
    assert ledger.allowed_types(pending(3, 3, group="vision"), ("a100",)) == (
        (),
        "user max GPUs 4",
    )
