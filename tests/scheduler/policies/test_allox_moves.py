"""AlloX moves: a running job leaves a slow device for a free faster one (no Django)."""

from __future__ import annotations

import pytest

from scheduler.core.invariants import check_decisions
from scheduler.core.types import Decisions, Job, PlacementKind, SchedulerSettings
from scheduler.policies import decide
from scheduler.policies.allox import migrate, migrates
from tests.scheduler.builders import devices, pending, preempted, running, snapshot, started

# Admin-set speeds (what attained service is normalized by); per-job speeds below.
SPEED = {"v100": 1.0, "p100": 0.9, "k80": 0.3}
V100_K80 = {"nv": ("v100", 1), "nk": ("k80", 1)}
SIZES = [20_000.0] * 60  # finished jobs: the remaining-service estimate has history


def speeds(k80: float, v100: float = 1.0) -> tuple[tuple[str, float], ...]:
    return (("v100", v100), ("k80", k80))


def on_k80(job_id: int, k80: float, **fields: object) -> Job:
    fields.setdefault("started_at", 0.0)  # long past the minimum runtime
    return running(job_id, (1,), throughputs=speeds(k80), attained_service=1_000.0, **fields)


def allox(jobs: list[Job], layout: dict | None = None, **settings: object):
    devs = devices(layout or V100_K80, SPEED)
    return snapshot(jobs, devs, placement=PlacementKind.ALLOX, finished=SIZES, **settings)


@pytest.mark.parametrize(
    ("job", "moves"),
    [
        # Crawling at 0.1 on the K80 while the V100 idles: it moves.
        (on_k80(1, 0.1), True),
        # Nearly as fast on the K80 (within the 10 % margin): staying is as good.
        (on_k80(1, 0.95), False),
        # Faster on the K80 than on the V100 (a Recommendation-like job): it stays.
        (on_k80(1, 1.4), False),
        # Inside its minimum runtime (started 100 s ago, minimum 300 s): protected.
        (on_k80(1, 0.1, started_at=9_900.0), False),
        # Not preemptible: never moved.
        (on_k80(1, 0.1, preemptible=False), False),
    ],
)
def test_a_running_job_moves_to_a_free_faster_device_only_when_it_gains(
    job: Job, moves: bool
) -> None:
    snap = allox([job])
    decisions = decide(snap)
    assert preempted(decisions) == ({1: None} if moves else {})
    assert started(decisions) == {}  # the target stays free until the job has stopped
    if moves:
        reason = decisions.preemptions[0].reason
        assert reason == "moving to a v100, where it runs 10.00× as fast as on its k80"


def test_the_moved_job_restarts_on_the_faster_device_next_round() -> None:
    # The round after the move: the job is pending with both devices free and takes the V100.
    moved = pending(
        1, 1, throughputs=speeds(0.1), attained_service=1_000.0, executed_since_promotion=3_000.0
    )
    decisions = decide(allox([moved]))
    assert started(decisions) == {1: (0,)}


def test_a_waiting_job_gets_the_free_device_before_a_running_job_moves_there() -> None:
    # Someone waits and wants the V100: it starts there; nobody moves.
    waiting = pending(2, 1, throughputs=speeds(0.1))
    decisions = decide(allox([on_k80(1, 0.1), waiting]))
    assert started(decisions) == {2: (0,)}
    assert preempted(decisions) == {}


def test_the_job_that_gains_most_takes_the_only_free_fast_device() -> None:
    layout = {"nv": ("v100", 1), "nk1": ("k80", 1), "nk2": ("k80", 1)}
    slow = running(1, (1,), throughputs=speeds(0.5), attained_service=1_000.0)
    slower = running(2, (2,), throughputs=speeds(0.1), attained_service=1_000.0)
    decisions = decide(allox([slow, slower], layout))
    assert preempted(decisions) == {2: None}


def test_gangs_and_jobs_far_back_in_the_queue_do_not_move(monkeypatch) -> None:
    gang = running(1, (2, 3), throughputs=speeds(0.1), attained_service=1_000.0)
    assert preempted(decide(allox([gang], {"nv": ("v100", 2), "nk": ("k80", 2)}))) == {}
    # A 2-GPU job waits ahead of the K80 job in the order (one V100 free, the other K80s
    # taken). By default nothing moves while a job waits for capacity.
    layout = {"nv": ("v100", 1), "nk": ("k80", 3)}
    single = running(1, (1,), throughputs=speeds(0.1), attained_service=1_000.0)
    other = running(3, (2, 3), throughputs=speeds(0.1), started_at=9_999.0)
    blocked = pending(2, 2, throughputs=speeds(0.1), submit_time=0.5)
    jobs = [single, other, blocked]
    assert preempted(decide(allox(jobs, layout, allox_window=50))) == {}
    # Allowed to move under a queue: with a window of 1 the K80 job would wait behind the
    # 2-GPU job after the move, outside the next round's window, so it stays; with 50 it
    # moves.
    monkeypatch.setattr("scheduler.policies.allox.MOVE_WHILE_JOBS_WAIT", True)
    assert preempted(decide(allox(jobs, layout, allox_window=1))) == {}
    assert preempted(decide(allox(jobs, layout, allox_window=50))) == {1: None}


@pytest.mark.parametrize(
    ("k80_speed_of_job_2", "swap"),
    [
        # Job 1 crawls on the K80 (0.1); job 2 holds the V100 but runs faster on a K80 (a
        # Recommendation-like job, 1.4): both gain by exchanging types. Nothing is free.
        (1.4, True),
        # Job 2 would lose (0.9 on a K80): jobs only move to run faster, so no exchange,
        # even though the pair would gain in total (no hopping back and forth).
        (0.9, False),
    ],
)
def test_two_running_jobs_exchange_types_when_each_gains(
    k80_speed_of_job_2: float, swap: bool
) -> None:
    crawler = on_k80(1, 0.1)
    holder = running(2, (0,), throughputs=speeds(k80_speed_of_job_2), attained_service=1_000.0)
    decisions = decide(allox([crawler, holder]))
    assert preempted(decisions) == ({1: None, 2: None} if swap else {})
    assert started(decisions) == {}


def test_moves_only_with_allox_placement() -> None:
    devs = devices(V100_K80, SPEED)
    snap = snapshot([on_k80(1, 0.1)], devs, placement=PlacementKind.BEST_FIT, finished=SIZES)
    assert preempted(decide(snap)) == {}
    assert migrates(SchedulerSettings())  # the default: las + AlloX
    assert not migrates(SchedulerSettings(placement=PlacementKind.BEST_FIT))
    assert not migrates(SchedulerSettings(policy="fifo"))


def test_moves_pass_the_invariants_and_are_deterministic() -> None:
    layout = {"nv": ("v100", 2), "np": ("p100", 1), "nk": ("k80", 3)}
    jobs = [
        running(1, (3,), throughputs=(("v100", 1.0), ("p100", 0.6), ("k80", 0.1))),
        running(2, (4,), throughputs=(("v100", 1.0), ("p100", 2.0), ("k80", 1.4))),
        running(3, (5,), throughputs=(("v100", 1.0), ("p100", 0.9), ("k80", 0.3))),
    ]
    snap = allox(jobs, layout)
    decisions = decide(snap)
    check_decisions(snap, decisions)
    assert decide(snap) == decisions
    # Two V100s and a P100 free: the K80 crawler and the 0.3 job take V100s; the
    # Recommendation-like job (2.0 on P100, 1.4 on its K80) takes the P100.
    assert preempted(decisions) == {1: None, 2: None, 3: None}
    assert migrate(snap, Decisions(order=decisions.order)) == Decisions(
        preemptions=decisions.preemptions, order=decisions.order
    )
