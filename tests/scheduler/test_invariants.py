"""`check_decisions`: every unsafe decision set is refused, safe ones pass."""

from __future__ import annotations

import pytest

from scheduler.core.invariants import InvariantViolation, check_decisions
from scheduler.core.types import (
    Account,
    Decisions,
    Hold,
    Node,
    Preempt,
    QueueChange,
    Quota,
    Reason,
    ReasonCode,
    Start,
)
from tests.scheduler.builders import REQUIRED, devices, pending, running, snapshot

DEVS = devices({"n1": ("a100", 4), "n2": ("v100", 4)})
WAIT = Reason(ReasonCode.WAITING_FOR_RESOURCES, "test")


def base_snapshot(**overrides: object):
    jobs = [
        running(1, [0, 1], started_at=0.0),
        pending(2, 2),
        pending(3, 2, consolidation=REQUIRED),
        pending(4, 1, accepted_types=("v100",)),
    ]
    return snapshot(jobs, DEVS, **overrides)


def holds_for(*job_ids: int) -> tuple[Hold, ...]:
    return tuple(Hold(job_id, WAIT, place) for place, job_id in enumerate(job_ids, start=1))


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        (Decisions(starts=(Start(2, (2, 3)),), holds=holds_for(2, 3, 4)), "more than one"),
        (Decisions(starts=(Start(9, (2, 3)),), holds=holds_for(2, 3, 4)), "unknown"),
        (Decisions(starts=(Start(1, (2, 3)),), holds=holds_for(2, 3, 4)), "already running"),
        (Decisions(preemptions=(Preempt(2, "x"),), holds=holds_for(3, 4)), "not running"),
        (Decisions(starts=(Start(2, (2,)),), holds=holds_for(3, 4)), "needs 2 distinct"),
        (Decisions(starts=(Start(2, (2, 2)),), holds=holds_for(3, 4)), "needs 2 distinct"),
        (Decisions(starts=(Start(2, (1, 2)),), holds=holds_for(3, 4)), "of job 1"),
        (Decisions(starts=(Start(2, (2, 99)),), holds=holds_for(3, 4)), "unknown device"),
        (
            Decisions(starts=(Start(2, (4, 5)), Start(4, (5,))), holds=holds_for(3)),
            "given to jobs 2 and 4",
        ),
        (Decisions(starts=(Start(4, (2,)),), holds=holds_for(2, 3)), "not one it accepts"),
        (Decisions(starts=(Start(3, (3, 4)),), holds=holds_for(2, 4)), "requires one node"),
        (Decisions(holds=holds_for(2, 3)), "neither start nor are held"),
        (Decisions(holds=(*holds_for(2, 3, 4), Hold(1, WAIT, 4))), "held but running"),
        (Decisions(holds=holds_for(2, 3, 4), queue_changes=(QueueChange(2, 5),)), "queue 5"),
        (Decisions(holds=holds_for(2, 3, 4), order=(1, 2, 3)), "order"),
    ],
)
def test_it_refuses_unsafe_decisions(decisions: Decisions, message: str) -> None:
    with pytest.raises(InvariantViolation, match=message):
        check_decisions(base_snapshot(), decisions)


def test_it_accepts_a_safe_round_that_reuses_a_preempted_jobs_devices() -> None:
    decisions = Decisions(
        starts=(Start(2, (0, 1)), Start(3, (2, 3)), Start(4, (4,))),
        preemptions=(Preempt(1, "test", by_job_id=2),),
        order=(2, 3, 4, 1),
    )
    check_decisions(base_snapshot(), decisions)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"busy": [2]}, "busy"),
        ({"nodes": [Node("n1", schedulable=False), Node("n2")]}, "unschedulable"),
        ({"min_runtime": 1e9}, "minimum runtime"),
    ],
)
def test_it_refuses_busy_devices_drained_nodes_and_early_preemption(
    overrides: dict[str, object], message: str
) -> None:
    decisions = Decisions(
        starts=(Start(2, (2, 3)),),
        preemptions=(Preempt(1, "test"),) if message == "minimum runtime" else (),
        holds=holds_for(3, 4),
    )
    with pytest.raises(InvariantViolation, match=message):
        check_decisions(base_snapshot(**overrides), decisions)


@pytest.mark.parametrize(
    ("quota", "allowed"),
    [
        (Quota(max_gpus=4), True),
        (Quota(max_gpus=3), False),
        (Quota(max_running_jobs=2), True),
        (Quota(max_running_jobs=1), False),
        (Quota(max_gpus_by_type=(("a100", 4),)), True),
        (Quota(max_gpus_by_type=(("a100", 3),)), False),
    ],
)
def test_quotas_must_hold_after_the_round_for_accounts_that_start_jobs(
    quota: Quota, allowed: bool
) -> None:
    snap = base_snapshot(users=[Account("alice", quota=quota)])
    decisions = Decisions(starts=(Start(2, (2, 3)),), holds=holds_for(3, 4))
    if allowed:
        check_decisions(snap, decisions)
    else:
        with pytest.raises(InvariantViolation, match="alice"):
            check_decisions(snap, decisions)


def test_a_running_job_over_a_lowered_quota_is_no_violation_when_nothing_starts() -> None:
    snap = base_snapshot(users=[Account("alice", quota=Quota(max_gpus=0))])
    check_decisions(snap, Decisions(holds=holds_for(2, 3, 4)))


def test_gpus_a_checkpointing_job_still_holds_count_against_its_owners_quota() -> None:
    # Alice (max 4 GPUs) runs job 1 on 2 GPUs; her preempted job 9 still checkpoints on
    # device 4. Starting job 2 on 2 more would make 5.
    from dataclasses import replace

    from scheduler.core.types import StoppingJob

    snap = base_snapshot(users=[Account("alice", quota=Quota(max_gpus=4))], busy=[4])
    decisions = Decisions(starts=(Start(2, (2, 3)),), holds=holds_for(3, 4))
    check_decisions(snap, decisions)
    with pytest.raises(InvariantViolation, match="alice uses 5 GPUs"):
        check_decisions(
            replace(snap, stopping_jobs=(StoppingJob(9, "alice", None, (4,)),)), decisions
        )
