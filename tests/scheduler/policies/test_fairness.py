"""Hard quotas and fair-share order (algorithms.md section 2)."""

from __future__ import annotations

import pytest

from scheduler.core.types import Account, Quota
from scheduler.policies import decide
from scheduler.policies.fairness import fair_share_order, normalized_usage
from tests.scheduler.builders import devices, held, pending, running, snapshot, started

MIXED = devices({"n1": ("a100", 4), "n2": ("v100", 4)})


# Each kind of quota, and the hold it gives a job that would break it (also used by
# test_quota_stopping_jobs.py).
QUOTA_CASES = [
    ([Account("alice", quota=Quota(max_gpus=2))], [], {}, "QuotaExceeded: user max GPUs 2"),
    (
        [Account("alice", quota=Quota(max_running_jobs=1))],
        [],
        {},
        "QuotaExceeded: user max running jobs 1",
    ),
    (
        [],
        [Account("vision", quota=Quota(max_gpus=2))],
        {"group": "vision"},
        "QuotaExceeded: group max GPUs 2",
    ),
    (
        [],
        [Account("vision", quota=Quota(max_running_jobs=1))],
        {"group": "vision"},
        "QuotaExceeded: group max running jobs 1",
    ),
    (
        [Account("alice", quota=Quota(max_gpus_by_type=(("a100", 2),)))],
        [],
        {"accepted_types": ("a100",)},
        "QuotaExceeded: user max a100 GPUs 2",
    ),
    (
        [],
        [Account("vision", quota=Quota(max_gpus_by_type=(("a100", 2),)))],
        {"group": "vision", "accepted_types": ("a100",)},
        "QuotaExceeded: group max a100 GPUs 2",
    ),
]


@pytest.mark.parametrize(
    ("users", "groups", "job_fields", "expected_hold"),
    QUOTA_CASES,
)
def test_a_job_that_would_exceed_a_quota_is_held_with_the_limit_it_hits(
    users: list[Account], groups: list[Account], job_fields: dict[str, object], expected_hold: str
) -> None:
    # Alice already runs a 1-GPU a100 job; the new 2-GPU job would exceed the limit.
    group = job_fields.get("group")
    jobs = [running(1, [0], group=group), pending(2, 2, **job_fields)]
    decisions = decide(snapshot(jobs, MIXED, users=users, groups=groups))
    assert held(decisions) == {2: expected_hold}


def test_a_per_type_quota_steers_a_job_to_another_type_it_accepts() -> None:
    users = [Account("alice", quota=Quota(max_gpus_by_type=(("a100", 1),)))]
    jobs = [running(1, [0]), pending(2, 2, accepted_types=("a100", "v100"))]
    snap = snapshot(jobs, MIXED, users=users)
    decisions = decide(snap)
    assert {snap.device_by_id[d].device_type for d in started(decisions)[2]} == {"v100"}


def test_quotas_never_preempt_running_jobs_after_an_admin_lowers_them() -> None:
    users = [Account("alice", quota=Quota(max_gpus=1))]
    jobs = [running(1, [0, 1, 2]), pending(2, 1)]
    decisions = decide(snapshot(jobs, MIXED, users=users))
    assert decisions.preemptions == ()
    assert held(decisions) == {2: "QuotaExceeded: user max GPUs 1"}


def test_a_quota_on_one_user_does_not_hold_another_users_jobs() -> None:
    users = [Account("alice", quota=Quota(max_gpus=0))]
    jobs = [pending(1, 1), pending(2, 1, user="bob")]
    decisions = decide(snapshot(jobs, MIXED, users=users))
    assert set(started(decisions)) == {2}


@pytest.mark.parametrize(
    ("fairness", "expected_order"),
    [
        # Alice (heavy usage) submitted first; Bob (light) later.
        (1.0, (3, 4, 1, 2)),  # strict share first: all of Bob's jobs go first
        (0.0, (1, 2, 3, 4)),  # arrival order only
    ],
)
def test_fair_share_orders_the_lighter_user_first_by_the_fairness_blend(
    fairness: float, expected_order: tuple[int, ...]
) -> None:
    users = [Account("alice", usage=10_000.0), Account("bob", usage=10.0)]
    jobs = [
        pending(1, 8, user="alice", submit_time=1.0),
        pending(2, 8, user="alice", submit_time=2.0),
        pending(3, 8, user="bob", submit_time=3.0),
        pending(4, 8, user="bob", submit_time=4.0),
    ]
    devs = devices({"n1": ("a100", 8)})
    decisions = decide(snapshot(jobs, devs, users=users, fairness=fairness))
    assert decisions.order == expected_order
    assert set(started(decisions)) == {expected_order[0]}


def test_a_half_blend_lets_a_light_user_overtake_only_jobs_that_arrived_not_much_earlier() -> None:
    users = [Account("alice", usage=10_000.0), Account("bob", usage=10.0)]
    ordered = [pending(i, 1, user="alice") for i in range(1, 5)] + [pending(5, 1, user="bob")]
    order = [
        job.id
        for job in fair_share_order(
            ordered, normalized_usage(snapshot(ordered, (), users=users), ordered), 0.5
        )
    ]
    # key: alice 0.5 * 1 + 0.5 * i/4; bob 0.5 * 0 + 0.5 * 1 = 0.5 -> ties with alice's first.
    assert order == [1, 5, 2, 3, 4]


@pytest.mark.parametrize(
    ("user_weight", "group_weights", "expected"),
    [
        (1.0, {"a": 1.0, "b": 1.0}, 200.0),  # 100 / (1 x 1/2)
        (2.0, {"a": 1.0, "b": 1.0}, 100.0),  # 100 / (2 x 1/2)
        (1.0, {"a": 3.0, "b": 1.0}, 400.0 / 3.0),  # 100 / (1 x 3/4)
        (0.0, {"a": 1.0, "b": 1.0}, float("inf")),  # weight 0: always last
    ],
)
def test_normalized_usage_divides_by_user_weight_and_group_share(
    user_weight: float, group_weights: dict[str, float], expected: float
) -> None:
    users = [Account("alice", weight=user_weight, usage=100.0)]
    groups = [Account(name, weight=weight) for name, weight in group_weights.items()]
    jobs = [pending(1, 1, user="alice", group="a"), pending(2, 1, user="bob", group="b")]
    usage = normalized_usage(snapshot(jobs, (), users=users, groups=groups), jobs)
    assert usage[("alice", "a")] == pytest.approx(expected)
    assert usage[("bob", "b")] == 0.0


def test_fair_share_applies_inside_a_queue_never_across_queues() -> None:
    users = [Account("alice", usage=0.0), Account("bob", usage=1e9)]
    jobs = [
        pending(1, 1, user="alice", service_since_promotion=5000.0, queue_level=1),
        pending(2, 1, user="bob"),
    ]
    decisions = decide(snapshot(jobs, MIXED, users=users))
    assert decisions.order == (2, 1)
