"""A job preempted this round still counts against its owner's quotas.

It checkpoints on its GPUs through the grace period (next round a `StoppingJob`); in the
round it is claimed, releasing its quota let another job of its owner start beside it,
over the owner's (or group's) limit, until the next round counted it again.
"""

from __future__ import annotations

import pytest

from scheduler.core.invariants import InvariantViolation, check_decisions
from scheduler.core.types import (
    Account,
    Decisions,
    Hold,
    PlacementKind,
    Preempt,
    Quota,
    Reason,
    ReasonCode,
    Start,
)
from scheduler.policies import decide
from scheduler.policies.allox import window_step
from tests.scheduler.builders import devices, held, pending, preempted, running, snapshot, started

THREE_V100 = devices({"n1": ("v100", 3)})
WAIT = Reason(ReasonCode.WAITING_FOR_RESOURCES, "test")


def veteran(job_id: int = 1, device_ids: tuple[int, ...] = (0, 1), **fields: object):  # type: ignore[no-untyped-def]
    """Alice's job, two hours on two GPUs: queue 1 under Tiresias' rules, any new job
    preempts it."""
    gpu_seconds = 7_200.0 * len(device_ids)
    return running(
        job_id,
        device_ids,
        started_at=0.0,
        attained_service=gpu_seconds,
        service_since_promotion=gpu_seconds,
        executed_since_promotion=7_200.0,
        **fields,
    )


@pytest.mark.parametrize(
    ("users", "groups", "alice_group", "hold"),
    [
        ([Account("alice", quota=Quota(max_gpus=2))], [], None, "user max GPUs 2"),
        (
            [Account("alice", quota=Quota(max_running_jobs=1))],
            [],
            None,
            "user max running jobs 1",
        ),
        ([], [Account("lab", quota=Quota(max_gpus=2))], "lab", "group max GPUs 2"),
        (
            [Account("alice", quota=Quota(max_gpus_by_type=(("v100", 2),)))],
            [],
            None,
            "user max v100 GPUs 2",
        ),
    ],
)
@pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])
def test_the_owner_of_a_job_preempted_this_round_starts_nothing_beside_it(
    users: list[Account],
    groups: list[Account],
    alice_group: str | None,
    hold: str,
    placement: PlacementKind,
) -> None:
    # Carol's 2-GPU job preempts alice's veteran (one GPU is free, so it needs the
    # veteran's two); alice's 1-GPU job would fit on the third GPU, but the veteran still
    # holds two GPUs while it checkpoints: alice (or her group) is at the limit.
    # Bob's 1-GPU job behind hers gets that GPU: the pass itself held alice's job (had it
    # only been caught by the final quota re-check, the GPU would have stayed idle).
    jobs = [
        veteran(group=alice_group),
        pending(2, 2, user="carol"),
        pending(3, 1, user="alice", group=alice_group),
        pending(4, 1, user="bob"),
    ]
    snap = snapshot(jobs, THREE_V100, users=users, groups=groups, placement=placement)
    decisions = decide(snap)  # the invariants run too
    assert preempted(decisions) == {1: 2}
    assert set(started(decisions)) == {2, 4}
    assert held(decisions) == {3: f"QuotaExceeded: {hold}"}


def test_a_claimant_preempting_its_owners_own_job_is_judged_as_before() -> None:
    # Alice (max 4 GPUs) runs the veteran on 2; her new 2-GPU job preempts it (nothing is
    # free): 2 + 2 is within her quota, as the pass checked before claiming.
    two = devices({"n1": ("v100", 2)})
    users = [Account("alice", quota=Quota(max_gpus=4))]
    decisions = decide(snapshot([veteran(), pending(2, 2)], two, users=users))
    assert preempted(decisions) == {1: 2}
    assert started(decisions) == {2: (0, 1)}


def test_the_allox_window_step_counts_the_rounds_victims() -> None:
    # The pass preempted alice's veteran for carol's job and held alice's 1-GPU job for room;
    # the window step must not start it on the free GPU while the veteran checkpoints.
    users = [Account("alice", quota=Quota(max_gpus=2))]
    jobs = [veteran(), pending(2, 2, user="carol"), pending(3, 1, user="alice")]
    snap = snapshot(jobs, THREE_V100, users=users, placement=PlacementKind.ALLOX)
    decisions = Decisions(
        starts=(Start(2, (0, 1)),),
        preemptions=(Preempt(1, "test", by_job_id=2),),
        holds=(Hold(3, WAIT, 1),),
        order=(2, 3, 1),
    )
    after = window_step(snap, decisions)
    assert started(after) == {2: (0, 1)}
    assert set(held(after)) == {3}
    # The control: without alice's quota the window step does start it there.
    free = snapshot(jobs, THREE_V100, placement=PlacementKind.ALLOX)
    assert started(window_step(free, decisions)) == {2: (0, 1), 3: (2,)}


def test_the_invariants_count_a_job_preempted_this_round_against_its_owner() -> None:
    users = [Account("alice", quota=Quota(max_gpus=2))]
    jobs = [veteran(), pending(2, 2, user="carol"), pending(3, 1, user="alice")]
    snap = snapshot(jobs, THREE_V100, users=users)
    claim = Preempt(1, "test", by_job_id=2)
    beside = Decisions(
        starts=(Start(2, (0, 1)), Start(3, (2,))), preemptions=(claim,), order=(2, 3, 1)
    )
    with pytest.raises(InvariantViolation, match="alice uses 3 GPUs"):
        check_decisions(snap, beside)
    alone = Decisions(
        starts=(Start(2, (0, 1)),), preemptions=(claim,), holds=(Hold(3, WAIT, 1),), order=(2, 3, 1)
    )
    check_decisions(snap, alone)
