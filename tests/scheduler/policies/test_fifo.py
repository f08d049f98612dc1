"""FIFO baselines: strict YARN-CS head-of-line blocking vs skip-ahead; never preemptive."""

from __future__ import annotations

import pytest

from scheduler.core.types import PlacementKind
from scheduler.policies import decide
from tests.scheduler.builders import devices, held, pending, running, snapshot, started

ONE_NODE = devices({"n1": ("a100", 8)})


@pytest.mark.parametrize(
    ("policy", "expected_starts", "expected_holds"),
    [
        (
            "fifo",
            {1},
            {
                2: "WaitingForResources: needs 8 \u00d7 GPU",
                3: "Behind: job 2 is first in line",
                4: "Behind: job 2 is first in line",
            },
        ),
        ("fifo-backfill", {1, 3, 4}, {2: "WaitingForResources: needs 8 \u00d7 GPU"}),
    ],
)
def test_strict_fifo_blocks_behind_the_head_while_fifo_backfill_skips_ahead(
    policy: str, expected_starts: set[int], expected_holds: dict[int, str]
) -> None:
    jobs = [
        running(0, [0, 1, 2, 3], submit_time=0.0),
        pending(1, 1, submit_time=1.0),
        pending(2, 8, submit_time=2.0),
        pending(3, 1, submit_time=3.0),
        pending(4, 2, submit_time=4.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, policy=policy))
    assert set(started(decisions)) == expected_starts
    assert held(decisions) == expected_holds
    assert decisions.order == (0, 1, 2, 3, 4)


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill"])
def test_fifo_never_preempts_even_a_job_with_a_lot_of_service(policy: str) -> None:
    jobs = [
        running(1, range(8), submit_time=5.0, service_since_promotion=1e6, queue_level=1),
        pending(2, 4, submit_time=1.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, policy=policy))
    assert decisions.preemptions == ()
    assert decisions.starts == ()
    assert decisions.queue_changes == ()


@pytest.mark.parametrize(
    ("blocked_fields", "reason"),
    [
        ({"accepted_types": ("h100",)}, "TypeUnavailable: no schedulable h100 in the cluster"),
        ({"user": "bob"}, "QuotaExceeded: user max running jobs 0"),
    ],
)
def test_a_job_that_can_never_run_does_not_block_strict_fifo(
    blocked_fields: dict[str, object], reason: str
) -> None:
    from scheduler.core.types import Account, Quota

    jobs = [pending(1, 1, **blocked_fields), pending(2, 1)]
    users = [Account("bob", quota=Quota(max_running_jobs=0))]
    decisions = decide(snapshot(jobs, ONE_NODE, policy="fifo", users=users))
    assert set(started(decisions)) == {2}
    assert held(decisions) == {1: reason}


def test_fifo_orders_by_submit_time_then_id() -> None:
    jobs = [
        pending(3, 1, submit_time=1.0),
        pending(2, 1, submit_time=1.0),
        pending(1, 1, submit_time=2.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, policy="fifo"))
    assert decisions.order == (2, 3, 1)


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill"])
def test_fifo_with_allox_placement_ignores_the_queue_thresholds(policy: str) -> None:
    """AlloX's prior job size came from the first threshold while no job had finished.

    The case hypothesis found: with job 1's 100 GPU-s of service, a 60 s threshold made it
    the longer job and swapped the two jobs' GPUs.
    """
    jobs = [
        pending(0, 1, submit_time=1.0),
        pending(1, 1, submit_time=0.0, attained_service=100.0, service_since_promotion=100.0),
    ]
    devs = devices({"n0": ("a100", 8)}, speed={"a100": 0.5})
    decisions = [
        decide(snapshot(jobs, devs, policy=policy, placement=PlacementKind.ALLOX, **thresholds))
        for thresholds in ({"queue_thresholds": (3600.0,)}, {"queue_thresholds": (60.0,)})
    ]
    assert decisions[0] == decisions[1]
