"""A per-type quota that takes some of a job's types away says so in the hold reason.

`QuotaLedger.allowed_types` drops the types a per-type limit blocks and names the limit
only when none is left. A job narrowed to types with no room was held WaitingForResources
(or Behind) while the GPUs the quota kept it from sat idle: now it is QuotaExceeded when
a type the quota took away has room for it, else the capacity reason names the quota too.
"""

from __future__ import annotations

import pytest

from scheduler.core.types import Account, PlacementKind, Quota
from scheduler.policies import decide
from scheduler.policies.fairness import QuotaLedger
from tests.scheduler.builders import devices, held, pending, preempted, running, snapshot, started

# a100: devices 0-3 on n1; v100: devices 4-5 on n2.
MIXED = devices({"n1": ("a100", 4), "n2": ("v100", 2)})
ALICE = [Account("alice", quota=Quota(max_gpus_by_type=(("a100", 1),)))]
EITHER = ("a100", "v100")


def aged(job_id: int, device_ids: tuple[int, ...], user: str):  # type: ignore[no-untyped-def]
    """Two hours on its GPUs: queue 1 under Tiresias' rules, a queue-0 job may preempt it."""
    gpu_seconds = 7_200.0 * len(device_ids)
    return running(
        job_id,
        device_ids,
        user=user,
        attained_service=gpu_seconds,
        service_since_promotion=gpu_seconds,
        executed_since_promotion=7_200.0,
    )


@pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])
@pytest.mark.parametrize("policy", ["las", "gittins", "fifo", "fifo-backfill"])
def test_a_job_the_quota_keeps_off_idle_gpus_is_held_quota_exceeded(
    placement: PlacementKind, policy: str
) -> None:
    # Alice runs her one a100; bob holds both v100s (same queue: not preemptible for her).
    # Her job takes an a100 or a v100: three a100s are free, but not for her.
    jobs = [
        running(1, (0,), user="alice"),
        running(2, (4, 5), user="bob"),
        pending(3, 1, user="alice", accepted_types=EITHER),
    ]
    snap = snapshot(jobs, MIXED, users=ALICE, placement=placement, policy=policy)
    decisions = decide(snap)
    assert started(decisions) == {}
    assert held(decisions) == {3: "QuotaExceeded: user max a100 GPUs 1"}


def test_without_idle_gpus_of_the_lost_type_the_capacity_reason_names_the_quota() -> None:
    # Carol fills the other three a100s: even without the quota, nothing is free for it.
    jobs = [
        running(1, (0,), user="alice"),
        running(2, (4, 5), user="bob"),
        running(4, (1, 2, 3), user="carol"),
        pending(3, 1, user="alice", accepted_types=EITHER),
    ]
    decisions = decide(snapshot(jobs, MIXED, users=ALICE))
    assert held(decisions) == {
        3: "WaitingForResources: needs 1 × a100/v100; quota rules out a100 (user max a100 GPUs 1)"
    }


def test_gpus_it_could_take_by_preemption_count_as_room_too() -> None:
    # Carol's a100 job is in queue 1: without the quota alice's job would preempt it.
    jobs = [
        running(1, (0,), user="alice"),
        running(2, (4, 5), user="bob"),
        aged(4, (1, 2, 3), user="carol"),
        pending(3, 1, user="alice", accepted_types=EITHER),
    ]
    decisions = decide(snapshot(jobs, MIXED, users=ALICE))
    assert preempted(decisions) == {}
    assert held(decisions) == {3: "QuotaExceeded: user max a100 GPUs 1"}


def test_without_the_quota_the_same_job_starts_on_an_a100() -> None:
    """The control: the quota, not room, held it above."""
    jobs = [
        running(1, (0,), user="alice"),
        running(2, (4, 5), user="bob"),
        pending(3, 1, user="alice", accepted_types=EITHER),
    ]
    decisions = decide(snapshot(jobs, MIXED))
    assert started(decisions) == {3: (1,)}


def test_a_job_held_so_still_takes_a_gpu_of_its_own_type_freed_later_in_the_round() -> None:
    # Alice's job (patience not served: it preempts nobody) comes first and is held
    # QuotaExceeded; dave's job then preempts bob's queue-1 v100 job and takes one of its
    # two v100s. The other is for alice's job (the pass's second look, step f).
    jobs = [
        running(1, (0,), user="alice"),
        aged(2, (4, 5), user="bob"),
        pending(3, 1, user="alice", accepted_types=EITHER, pending_since=10_000.0),
        pending(5, 1, user="dave", accepted_types=("v100",), pending_since=0.0),
    ]
    decisions = decide(snapshot(jobs, MIXED, users=ALICE, preempt_patience=600.0))
    assert preempted(decisions) == {2: 5}
    assert started(decisions) == {5: (4,), 3: (5,)}


def test_the_ledger_names_each_type_a_per_type_limit_takes_away() -> None:
    snap = snapshot([running(1, (0,), user="alice")], MIXED, users=ALICE)
    ledger = QuotaLedger(snap, [snap.jobs[0]])
    job = pending(3, 1, user="alice", accepted_types=EITHER)
    assert ledger.type_blocks(job, EITHER) == [("a100", "user max a100 GPUs 1")]
    assert ledger.type_blocks(pending(4, 1, user="bob"), EITHER) == []
