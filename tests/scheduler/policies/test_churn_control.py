"""gpulab's additions to Tiresias (SchedulerSettings: preempt_patience, preempt_margin,
max_victims, starvation_seconds): who may preempt whom, how many, and the reservation.

All cases use gpulab's default settings (`gpulab_defaults=True`: 12 queues, 3600 GPU-s
then doubling, patience 600 s, margin 3, one victim, starvation after 3600 s) and change one
knob at a time. `now` is 10,000 s; running jobs started at 0 (past the minimum runtime).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduler.core.types import (
    DEFAULT_QUEUE_THRESHOLDS,
    Account,
    Decisions,
    Job,
    Quota,
    Reason,
    ReasonCode,
)
from scheduler.policies import decide
from tests.scheduler.builders import devices, pending, preempted, running, snapshot, started

NOW = 10_000.0
ONE_NODE = devices({"n1": ("a100", 8)})


def at_level(level: int) -> dict[str, Any]:
    """Job fields that put a job in queue `level` of the default thresholds."""
    service = 0.0 if level == 0 else DEFAULT_QUEUE_THRESHOLDS[level - 1]
    return {
        "attained_service": service,
        "service_since_promotion": service,
        "executed_since_promotion": 1.0 if service else 0.0,
        "queue_level": level,
    }


def waiting(job_id: int, gpus: int, *, level: int = 0, waited: float, **fields: Any) -> Job:
    return pending(job_id, gpus, pending_since=NOW - waited, **at_level(level), **fields)


def full_node(*jobs: tuple[int, int, int]) -> list[Job]:
    """(job id, GPUs, queue level) running jobs filling ONE_NODE's devices in order."""
    result, next_device = [], 0
    for job_id, gpus, level in jobs:
        ids = range(next_device, next_device + gpus)
        result.append(running(job_id, ids, **at_level(level)))
        next_device += gpus
    return result


def run(jobs: list[Job], **settings: Any) -> Decisions:
    return decide(snapshot(jobs, ONE_NODE, now=NOW, gpulab_defaults=True, **settings))


def reasons(decisions: Decisions) -> dict[int, Reason]:
    return {hold.job_id: hold.reason for hold in decisions.holds}


@pytest.mark.parametrize(
    ("waited", "patience", "preempts"),
    [
        (100.0, 600.0, False),  # a completion may free a GPU within minutes: wait
        (599.0, 600.0, False),
        (600.0, 600.0, True),  # patience served
        (100.0, 0.0, True),  # 0 = Tiresias: at once
    ],
)
def test_a_waiting_job_preempts_only_after_its_patience(
    waited: float, patience: float, preempts: bool
) -> None:
    jobs = [*full_node((1, 8, 8)), waiting(2, 1, waited=waited)]
    decisions = run(jobs, preempt_patience=patience)
    assert preempted(decisions) == ({1: 2} if preempts else {})
    assert started(decisions) == ({2: (0,)} if preempts else {})


@pytest.mark.parametrize(
    ("victim_level", "margin", "preempts"),
    [
        (2, 3, False),  # 2 queues below: similar service, they would trade places
        (3, 3, True),  # 3 queues below (>= 8x the service bracket)
        (1, 1, True),  # margin 1 = Tiresias: any lower queue
        (0, 1, False),  # never within a queue
    ],
)
def test_a_waiting_job_preempts_only_jobs_at_least_the_margin_below_it(
    victim_level: int, margin: int, preempts: bool
) -> None:
    jobs = [*full_node((1, 8, victim_level)), waiting(2, 1, waited=700.0)]
    decisions = run(jobs, preempt_margin=margin)
    assert preempted(decisions) == ({1: 2} if preempts else {})


@pytest.mark.parametrize(("max_victims", "preempts"), [(1, False), (2, True), (0, True)])
def test_one_waiting_job_displaces_at_most_max_victims(max_victims: int, preempts: bool) -> None:
    # A 4-GPU job fits only by preempting two 2-GPU jobs; the rest is held by a job in
    # queue 0 (not a candidate).
    jobs = [*full_node((1, 4, 0), (2, 2, 9), (3, 2, 8)), waiting(9, 4, waited=700.0)]
    decisions = run(jobs, max_victims=max_victims)
    assert preempted(decisions) == ({2: 9, 3: 9} if preempts else {})
    if not preempts:
        assert reasons(decisions)[9].code in (ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES)


def test_a_starving_job_takes_the_widest_victims_beyond_the_limit_and_the_margin() -> None:
    # Lowest priority first would take the four 1-GPU jobs in queue 9; the starving job takes
    # the one 4-GPU job (queue 5: only 2 queues below it, inside the margin for others).
    jobs = [
        *full_node((1, 4, 5), (2, 1, 9), (3, 1, 9), (4, 1, 9), (5, 1, 9)),
        waiting(9, 4, level=3, waited=4000.0),
    ]
    decisions = run(jobs)
    assert preempted(decisions) == {1: 9}
    assert "starvation guard" in next(p.reason for p in decisions.preemptions)
    # The same job before it starves: it may not preempt 2 queues below, and the jobs of
    # queue 9 would be four victims.
    assert preempted(run([*jobs[:-1], waiting(9, 4, level=3, waited=700.0)])) == {}


def test_a_job_promoted_by_the_knob_preempts_under_the_ordinary_rules() -> None:
    # Ran 1000 s on 4 GPUs (queue 1), then waited 4100 s >= knob 4 x 1000: promoted to queue
    # 0 this round. Not starving (pending 700 s < 3600 s): margin 3 and one victim apply, so
    # it takes neither the 4-GPU job of queue 2 nor four 1-GPU jobs of queue 9.
    promoted = pending(
        9,
        4,
        pending_since=NOW - 700.0,
        attained_service=4000.0,
        service_since_promotion=4000.0,
        executed_since_promotion=1000.0,
        waiting_since_promotion=4100.0,
        queue_level=1,
    )
    jobs = [*full_node((1, 4, 2), (2, 1, 9), (3, 1, 9), (4, 1, 9), (5, 1, 9)), promoted]
    decisions = run(jobs)
    assert [c.job_id for c in decisions.queue_changes if c.promoted] == [9]
    assert preempted(decisions) == {}
    # Starving, it would take the widest victim: the 4-GPU job, two queues below it.
    starving = replace(promoted, pending_since=NOW - 4000.0)
    assert preempted(run([*jobs[:-1], starving])) == {1: 9}


def test_devices_are_kept_for_a_starving_job_that_cannot_start_yet() -> None:
    # 4 GPUs free. The starving 8-GPU job (queue 2) cannot start: the running jobs are in
    # its own queue or above. A queue-5 job behind it would take the free GPUs; it is held
    # Reserved. A queue-0 job (higher priority than the starving job) still starts.
    jobs = [
        *full_node((1, 2, 0), (2, 2, 2)),
        waiting(7, 8, level=2, waited=4000.0, submit_time=1.0),
        waiting(8, 1, level=5, waited=10.0),
        waiting(9, 1, level=0, waited=10.0),
    ]
    decisions = run(jobs)
    assert set(started(decisions)) == {9}
    assert reasons(decisions)[8].code is ReasonCode.RESERVED
    assert "job 7" in reasons(decisions)[8].detail
    assert reasons(decisions)[7].code in (ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES)
    # Guard off: the queue-5 job backfills.
    assert set(started(run(jobs, starvation_seconds=0.0))) == {8, 9}


def test_a_job_that_would_fit_once_the_reservation_cut_a_start_is_held_reserved() -> None:
    # 4 GPUs free. In the pass the queue-5 1-GPU job (8) starts and leaves 3, so the
    # queue-5 4-GPU job (10) behind it is held for capacity; the reservation then cuts job
    # 8's start, and 4 GPUs are free: job 10 fits, and only the reservation keeps it out.
    # Its reason must say so (found by the hypothesis property on held jobs).
    jobs = [
        *full_node((1, 2, 0), (2, 2, 2)),
        waiting(7, 8, level=2, waited=4000.0, submit_time=1.0),
        waiting(8, 1, level=5, waited=10.0),
        waiting(10, 4, level=5, waited=10.0, submit_time=2.0),
    ]
    decisions = run(jobs)
    assert started(decisions) == {}
    assert reasons(decisions)[8].code is ReasonCode.RESERVED
    assert reasons(decisions)[10].code is ReasonCode.RESERVED


def test_a_quota_held_starving_job_reserves_nothing() -> None:
    jobs = [
        *full_node((1, 2, 0)),
        waiting(7, 2, level=2, waited=4000.0, user="bob"),
        waiting(8, 1, level=5, waited=10.0),
    ]
    users = [Account("alice"), Account("bob", quota=Quota(max_gpus=1))]
    decisions = decide(snapshot(jobs, ONE_NODE, now=NOW, users=users, gpulab_defaults=True))
    assert reasons(decisions)[7].code is ReasonCode.QUOTA_EXCEEDED
    assert set(started(decisions)) == {8}


@pytest.mark.parametrize(
    ("waited", "expected"),
    [
        (100.0, NOW + 500.0),  # patience ends first
        (700.0, NOW + 2900.0),  # then starvation
        (5000.0, None),  # both clocks already ran out
    ],
)
def test_the_round_says_when_a_held_jobs_clock_runs_out(
    waited: float, expected: float | None
) -> None:
    jobs = [*full_node((1, 8, 0)), waiting(2, 2, waited=waited)]
    assert run(jobs).wake_at == expected
    # A single-GPU job has no starvation clock (`starving_jobs`): only its patience.
    single = [*full_node((1, 8, 0)), waiting(2, 1, waited=waited)]
    assert run(single).wake_at == (expected if waited < 600.0 else None)
