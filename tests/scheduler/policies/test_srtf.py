"""SRTF / SRSF with perfect knowledge (simulator baselines)."""

from __future__ import annotations

import pytest

from scheduler.policies import decide
from scheduler.policies.srtf import remaining_service, remaining_time
from tests.scheduler.builders import devices, pending, preempted, running, snapshot, started

ONE_NODE = devices({"n1": ("a100", 8)})


@pytest.mark.parametrize(
    ("total_work", "attained", "gpus", "expected_time", "expected_service"),
    [
        (8000.0, 0.0, 4, 2000.0, 8000.0),
        (8000.0, 6000.0, 2, 1000.0, 2000.0),
        (100.0, 500.0, 1, 0.0, 0.0),  # overran its estimate: nothing left, never negative
        (None, 0.0, 1, float("inf"), float("inf")),
    ],
)
def test_remaining_time_is_remaining_service_over_gpus(
    total_work: float | None,
    attained: float,
    gpus: int,
    expected_time: float,
    expected_service: float,
) -> None:
    job = pending(1, gpus, total_work=total_work, attained_service=attained)
    assert remaining_time(job) == expected_time
    assert remaining_service(job) == expected_service


@pytest.mark.parametrize(
    ("policy", "expected_order"),
    [
        # Job 1: 8 GPUs x 100 s = 800 GPU-s. Job 2: 1 GPU x 400 s = 400 GPU-s.
        ("srtf", (1, 2)),  # 100 s < 400 s
        ("srsf", (2, 1)),  # 400 GPU-s < 800 GPU-s
    ],
)
def test_srtf_ranks_by_time_and_srsf_by_service(
    policy: str, expected_order: tuple[int, ...]
) -> None:
    jobs = [pending(1, 8, total_work=800.0), pending(2, 1, total_work=400.0)]
    decisions = decide(snapshot(jobs, ONE_NODE, policy=policy))
    assert decisions.order == expected_order
    assert set(started(decisions)) == {expected_order[0]}


@pytest.mark.parametrize("policy", ["srtf", "srsf"])
def test_a_shorter_job_preempts_a_longer_running_one(policy: str) -> None:
    jobs = [
        running(1, range(8), total_work=1e6, attained_service=10.0),
        pending(2, 8, total_work=100.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, policy=policy))
    assert preempted(decisions) == {1: 2}
    assert set(started(decisions)) == {2}


def test_a_shorter_job_does_not_preempt_inside_the_minimum_runtime() -> None:
    jobs = [
        running(1, range(8), total_work=1e6, started_at=9_900.0),
        pending(2, 8, total_work=100.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, policy="srtf"))
    assert decisions.preemptions == ()
