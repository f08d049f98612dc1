"""AlloX placement: matching, accepted types, gangs, α, window, determinism (no Django)."""

from __future__ import annotations

import math

import pytest

from scheduler.core.types import Consolidation, Job, PlacementKind
from scheduler.policies import decide
from scheduler.policies.allox import (
    RemainingService,
    allox_place,
    allox_rematch,
    place,
    user_scores,
)
from scheduler.policies.gittins import load_prior, size_distribution
from scheduler.policies.placement import PLACERS
from tests.scheduler.builders import (
    ANY,
    PREFERRED,
    REQUIRED,
    devices,
    held,
    nodes_of,
    pending,
    preempted,
    running,
    snapshot,
    started,
)

V100_K80 = {"nv": ("v100", 1), "nk": ("k80", 1)}
SPEED = {"v100": 1.0, "p100": 0.9, "k80": 0.3}


def speeds(v100: float = 1.0, k80: float = 0.3, p100: float | None = None) -> tuple:
    pairs = [("v100", v100), ("k80", k80)]
    if p100 is not None:
        pairs.append(("p100", p100))
    return tuple(pairs)


def pass_only(snap):
    """The `las` pass without the AlloX steps after it (what `allox_rematch` receives)."""
    from scheduler.policies.base import run_pass
    from scheduler.policies.las import fifo_within_queue, tiresias_order, tiresias_queues

    queues = tiresias_queues(snap)
    ordered = tiresias_order(snap, queues, fifo_within_queue)
    return run_pass(
        snap,
        ordered,
        preemption_class=queues.levels,
        levels=queues.levels,
        queue_changes=queues.changes,
    )


def placed_types(placements: dict[int, tuple[int, ...]], devs) -> dict[int, str]:
    by_id = {d.id: d for d in devs}
    return {job_id: by_id[ids[0]].device_type for job_id, ids in placements.items()}


def test_allox_is_the_registered_allox_placer() -> None:
    assert PLACERS[PlacementKind.ALLOX] is allox_place


@pytest.mark.parametrize(
    ("k80_first", "k80_second", "expected"),
    [
        # The second job loses less on the K80 (0.6 of its V100 speed vs 0.2): it goes there
        # even though the first job comes first in priority order.
        (0.2, 0.6, {1: "v100", 2: "k80"}),
        # Mirror image: the first job is the one that barely slows down on a K80.
        (0.7, 0.15, {1: "k80", 2: "v100"}),
        # Recommendation-like job that is faster on the K80 takes it.
        (1.4, 0.3, {1: "k80", 2: "v100"}),
    ],
)
def test_allox_places_the_slower_device_type_on_the_job_that_loses_least_there(
    k80_first: float, k80_second: float, expected: dict[int, str]
) -> None:
    devs = devices(V100_K80, SPEED)
    jobs = [
        pending(1, 1, throughputs=speeds(k80=k80_first)),
        pending(2, 1, throughputs=speeds(k80=k80_second)),
    ]
    placements = allox_place(jobs, devs, snapshot(jobs, devs))
    assert placed_types(placements, devs) == expected


def test_allox_lets_a_job_wait_for_a_fast_device_rather_than_crawl_on_a_slow_one() -> None:
    # Both jobs are 10x slower on a K80: running both on the V100 one after the other
    # (cost p + 2p) beats one of them on the K80 (p + 10p); only the first in line starts.
    devs = devices(V100_K80, SPEED)
    jobs = [pending(1, 1, throughputs=speeds(k80=0.1)), pending(2, 1, throughputs=speeds(k80=0.1))]
    placements = allox_place(jobs, devs, snapshot(jobs, devs))
    assert placed_types(placements, devs) == {1: "v100"}


@pytest.mark.parametrize(
    ("accepted", "expected_type"),
    [
        (("k80",), "k80"),  # only accepts the slow type: gets it although the V100 is free
        (("v100",), "v100"),
        (("a100",), None),  # a type the free devices do not have: not placed
        ((), "v100"),  # accepts anything: the fast type
    ],
)
def test_allox_honours_accepted_types(accepted: tuple[str, ...], expected_type: str | None) -> None:
    devs = devices(V100_K80, SPEED)
    jobs = [pending(1, 1, accepted_types=accepted, throughputs=speeds(k80=0.2))]
    placements = allox_place(jobs, devs, snapshot(jobs, devs))
    assert placed_types(placements, devs).get(1) == expected_type


def test_allox_never_uses_a_type_the_job_cannot_run_on() -> None:
    # Gavel stores 0.0 for ResNet-50 bs128 at scale > 1 on K80: speed 0 means "cannot run".
    devs = devices({"nk": ("k80", 2)}, SPEED)
    jobs = [pending(1, 1, throughputs=(("v100", 1.0), ("k80", 0.0)))]
    assert allox_place(jobs, devs, snapshot(jobs, devs)) == {}


@pytest.mark.parametrize(
    ("layout", "gpus", "consolidation", "expected_nodes"),
    [
        # A gang takes all its GPUs or nothing: 3 free, 4 needed.
        ({"n1": ("v100", 3)}, 4, PREFERRED, None),
        # `required` never spans nodes even when the type has enough devices in total.
        ({"n1": ("v100", 2), "n2": ("v100", 2)}, 4, REQUIRED, None),
        # `preferred` spreads over several pools of one type when no node holds it.
        ({"n1": ("v100", 2), "n2": ("v100", 2)}, 4, PREFERRED, {"n1", "n2"}),
        ({"n1": ("v100", 2), "n2": ("v100", 2)}, 4, ANY, {"n1", "n2"}),
        # One type per gang: 2 V100 + 2 K80 free do not make a 4-GPU job.
        ({"n1": ("v100", 2), "n2": ("k80", 2)}, 4, ANY, None),
        # Best fit: the tightest node that holds the whole gang.
        ({"n1": ("v100", 8), "n2": ("v100", 4)}, 4, PREFERRED, {"n2"}),
    ],
)
def test_allox_places_gangs_all_or_nothing_on_one_type(
    layout: dict[str, tuple[str, int]],
    gpus: int,
    consolidation: Consolidation,
    expected_nodes: set[str] | None,
) -> None:
    devs = devices(layout, SPEED)
    jobs = [pending(1, gpus, consolidation=consolidation)]
    snap = snapshot(jobs, devs)
    placements = allox_place(jobs, devs, snap)
    if expected_nodes is None:
        assert placements == {}
    else:
        assert len(placements[1]) == gpus
        assert nodes_of(snap, placements[1]) == expected_nodes
        assert len({snap.device_by_id[d].device_type for d in placements[1]}) == 1


def _crowded_cluster(alpha: float, second_needs: int = 1):
    """Alice holds three V100s; Bob holds none. One V100 is free."""
    devs = devices({"n1": ("v100", 4)}, SPEED)
    alice_running = [running(10 + i, (i,), user="alice") for i in range(3)]
    jobs = [pending(1, 1, user="alice"), pending(2, second_needs, user="bob")]
    snap = snapshot([*alice_running, *jobs], devs, allox_alpha=alpha)
    return jobs, [devs[3]], snap


@pytest.mark.parametrize(
    ("alpha", "expected"),
    [
        # α = 0.5 of 2 active users admits the lowest-L user first: Bob takes the one free
        # device, although Alice's job is first in priority order.
        (0.5, {2}),
        # α = 1 is pure efficiency: priority order decides the tie.
        (1.0, {1}),
    ],
)
def test_alpha_admits_only_the_lowest_share_users(alpha: float, expected: set[int]) -> None:
    jobs, free, snap = _crowded_cluster(alpha)
    assert set(allox_place(jobs, free, snap)) == expected


def test_alpha_orders_users_but_leaves_no_device_idle_that_a_waiting_job_fits() -> None:
    # Alice holds three of five V100s, Bob none; two are free. α = 0.5 admits Bob first; a
    # second matching over everyone gives Alice's job the other free device. Only one
    # matching used to run, so the second free V100 stayed idle until the next round.
    devs = devices({"n1": ("v100", 5)}, SPEED)
    alice_running = [running(10 + i, (i,), user="alice") for i in range(3)]
    jobs = [pending(1, 1, user="alice"), pending(2, 1, user="bob")]
    snap = snapshot([*alice_running, *jobs], devs, allox_alpha=0.5)
    placements = allox_place(jobs, [devs[3], devs[4]], snap)
    assert set(placements) == {1, 2}


def test_the_window_bounds_one_matching_not_how_many_jobs_start() -> None:
    # 12 single-GPU jobs, 12 free devices, a window of 5: three matchings start all twelve.
    # One matching of the first 5 used to leave 7 devices idle for a round.
    devs = devices({"n1": ("v100", 8), "n2": ("k80", 4)}, SPEED)
    jobs = [pending(i, 1, user=f"u{i % 3}") for i in range(1, 13)]
    snap = snapshot(jobs, devs, allox_alpha=0.5, allox_window=5)
    placements = allox_place(jobs, devs, snap)
    assert set(placements) == set(range(1, 13))
    assert len({d for ids in placements.values() for d in ids}) == 12


def test_gangs_left_out_by_packing_are_matched_again_on_what_is_left() -> None:
    # Two 4-GPU gangs and one free 4-GPU pool on each of two types, both faster on the V100:
    # the matching puts both on the V100 class (one job per first slot), packing fits one,
    # and the other, matched again, takes the K80 pool instead of waiting a round.
    devs = devices({"n1": ("v100", 4), "n2": ("k80", 4)}, SPEED)
    jobs = [pending(1, 4), pending(2, 4)]
    placements = allox_place(jobs, devs, snapshot(jobs, devs))
    assert placed_types(placements, devs) == {1: "v100", 2: "k80"}


def test_alpha_doubles_when_nothing_the_admitted_users_have_can_be_placed() -> None:
    # Bob (lowest L) needs 2 GPUs and only one is free: α doubles to 1 and Alice's job runs.
    jobs, free, snap = _crowded_cluster(0.5, second_needs=2)
    assert set(allox_place(jobs, free, snap)) == {1}


@pytest.mark.parametrize(
    ("placed_on", "expected_score"),
    [
        # 1 of 4 GPUs on its fastest type counts fully.
        ("v100", 0.25),
        # On a K80 where it runs at half speed it counts for half (normalized to fastest).
        ("k80", 0.125),
    ],
)
def test_user_score_is_dominant_share_normalized_to_the_fastest_device(
    placed_on: str, expected_score: float
) -> None:
    devs = devices({"n1": ("v100", 2), "n2": ("k80", 2)}, SPEED)
    device_id = 0 if placed_on == "v100" else 2
    job = running(1, (device_id,), user="alice", throughputs=speeds(k80=0.5))
    assert user_scores(snapshot([job], devs)) == {"alice": pytest.approx(expected_score)}


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        # Window 1: only the head job is considered; it takes the K80 (nothing better).
        (1, {1: "k80"}),
        # Window 3: the third job loses least on the K80 and takes it.
        (3, {3: "k80"}),
    ],
)
def test_window_bounds_the_jobs_that_enter_the_matching(
    window: int, expected: dict[int, str]
) -> None:
    devs = devices({"nk": ("k80", 1)}, SPEED)
    jobs = [
        pending(1, 1, throughputs=speeds(k80=0.1)),
        pending(2, 1, throughputs=speeds(k80=0.2)),
        pending(3, 1, throughputs=speeds(k80=0.5)),
    ]
    placements = allox_place(jobs, devs, snapshot(jobs, devs, allox_window=window))
    assert placed_types(placements, devs) == expected


def test_allox_is_deterministic_and_breaks_ties_by_priority_order() -> None:
    devs = devices({"n1": ("v100", 2), "n2": ("k80", 2)}, SPEED)
    jobs = [pending(i, 1, throughputs=speeds(k80=0.6)) for i in range(1, 7)]
    snap = snapshot(jobs, devs)
    first = allox_place(jobs, devs, snap)
    assert all(allox_place(jobs, tuple(reversed(devs)), snap) == first for _ in range(3))
    # Identical jobs: the earliest two get the V100s, the next two the K80s; the last two
    # are matched behind the V100s (second in line there) and wait.
    assert placed_types(first, devs) == {1: "v100", 2: "v100", 3: "k80", 4: "k80"}


def test_allox_takes_throughputs_before_admin_speeds() -> None:
    # Admin speeds say V100 > P100, but this job measured 2x faster on the P100.
    devs = devices({"nv": ("v100", 1), "np": ("p100", 1)}, SPEED)
    jobs = [
        pending(1, 1, throughputs=(("v100", 1.0), ("p100", 2.0))),
        pending(2, 1),  # no measurements: admin speeds, V100 is its best
    ]
    placements = allox_place(jobs, devs, snapshot(jobs, devs))
    assert placed_types(placements, devs) == {1: "p100", 2: "v100"}


@pytest.mark.parametrize(
    ("sizes", "attained", "expected"),
    [
        ([10.0, 20.0, 30.0, 40.0], 0.0, 25.0),  # the mean size
        ([10.0, 20.0, 30.0, 40.0], 25.0, 10.0),  # E[S - 25 | S > 25] = 35 - 25
        ([10.0, 20.0, 30.0, 40.0], 50.0, 50.0),  # beyond every sample: as much again
        ([10.0, 20.0, 30.0, 400.0], 500.0, 500.0),  # ... never less than the median (25)
        ([], 0.0, 1.0),  # nothing to go on: a floor, never 0
    ],
)
def test_expected_remaining_service_is_conditional_on_attained_service(
    sizes: list[float], attained: float, expected: float
) -> None:
    estimator = RemainingService(sizes)
    assert estimator.expected(attained) == pytest.approx(expected)


def _prior_remaining(attained: float) -> float:
    sizes = load_prior().sizes
    above = sizes[sizes > attained]
    return float((above - attained).mean())


# (finished job sizes, gittins_history, attained) -> the distribution AlloX conditions on.
# Before: below `gittins_min_samples` it used max(attained, first queue threshold), and
# `gittins_history = 0` kept the whole history (`sizes[-0:]`).
@pytest.mark.parametrize(
    ("finished", "history", "attained", "expected"),
    [
        ((), 1000, 0.0, _prior_remaining(0.0)),  # no history: the shipped prior
        ((), 1000, 20_000.0, _prior_remaining(20_000.0)),
        ((100.0,) * 49, 1000, 0.0, _prior_remaining(0.0)),  # fewer than 50: still the prior
        ((100.0,) * 50, 1000, 0.0, 100.0),  # 50 of the lab's own jobs: theirs
        ((100.0,) * 50 + (300.0,) * 50, 50, 0.0, 300.0),  # only the last `gittins_history`
        ((100.0,) * 60, 0, 0.0, _prior_remaining(0.0)),  # history 0: the prior, not all
    ],
)
def test_expected_remaining_service_uses_the_gittins_size_distribution(
    finished: tuple[float, ...], history: int, attained: float, expected: float
) -> None:
    devs = devices(V100_K80, SPEED)
    snap = snapshot(
        [pending(1, 1)],
        devs,
        finished=finished,
        gittins_history=history,
        gittins_min_samples=50,
    )
    assert size_distribution(snap).sizes.size > 0
    estimate = RemainingService.from_snapshot(snap).expected(attained)
    assert estimate == pytest.approx(expected)


def test_a_long_running_job_weighs_more_and_gets_the_fast_device() -> None:
    # Same speeds; the job that already ran long is expected to run long still, so the
    # matching gives it the V100 and the fresh job the K80.
    devs = devices(V100_K80, SPEED)
    sizes = [100.0] * 50 + [10_000.0] * 50
    jobs = [
        pending(1, 1, throughputs=speeds(k80=0.6)),
        pending(2, 1, throughputs=speeds(k80=0.6), attained_service=500.0),
    ]
    placements = allox_place(jobs, devs, snapshot(jobs, devs, finished=sizes))
    assert placed_types(placements, devs) == {1: "k80", 2: "v100"}


def test_busy_devices_can_be_offered_as_delayed_slots() -> None:
    # A V100 frees soon (its job is nearly done); waiting for it beats 10x slower on a K80.
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    sizes = [1000.0] * 60
    busy_job = running(9, (0,), attained_service=990.0)
    job = pending(1, 1, throughputs=speeds(k80=0.1))
    snap = snapshot([busy_job, job], devs, finished=sizes)
    free = [devs[1]]
    assert place([job], free, snap, offer_busy=False) == {1: (1,)}
    assert place([job], free, snap, offer_busy=True) == {}


def test_rematch_lets_a_job_further_back_take_the_device_it_loses_least_on() -> None:
    # The pass picks the head job for the only free device (a K80); the rematch sees the
    # window and starts the job that barely slows down there instead. (The efficiency gate,
    # tested in test_efficiency_gate.py, would narrow job 1 to V100s before the pass.)
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    busy_job = running(9, (0,), attained_service=10.0, started_at=9_999.0)
    jobs: list[Job] = [
        busy_job,
        pending(1, 1, throughputs=speeds(k80=0.1)),
        pending(2, 1, throughputs=speeds(k80=0.9)),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX, allox_efficiency_gate=0.0)
    base = pass_only(snap)
    assert {s.job_id for s in base.starts} == {1}
    rematched = allox_rematch(snap, base)
    # `las` with AlloX placement runs the same step itself.
    assert decide(snap) == rematched
    assert {s.job_id: s.device_ids for s in rematched.starts} == {2: (1,)}
    assert {h.job_id for h in rematched.holds} == {1}
    assert [h.position for h in rematched.holds] == [1]


def test_allox_handles_no_jobs_and_no_devices() -> None:
    devs = devices(V100_K80, SPEED)
    jobs = [pending(1, 1)]
    assert allox_place([], devs, snapshot(jobs, devs)) == {}
    assert allox_place(jobs, [], snapshot(jobs, devs)) == {}
    assert math.isfinite(RemainingService([]).expected(0.0))


@pytest.mark.parametrize(
    ("placement", "window", "expected_start"),
    [
        # Not AlloX placement: the pass's decisions are returned untouched.
        (PlacementKind.BEST_FIT, 50, 1),
        # A window of one: only the pass's own start is a candidate.
        (PlacementKind.ALLOX, 1, 1),
        (PlacementKind.ALLOX, 50, 2),
    ],
)
def test_rematch_only_widens_the_choice_for_allox_within_the_window(
    placement: PlacementKind, window: int, expected_start: int
) -> None:
    devs = devices({"nk": ("k80", 1)}, SPEED)
    jobs = [
        pending(1, 1, throughputs=speeds(k80=0.1)),
        pending(2, 1, throughputs=speeds(k80=0.9)),
    ]
    snap = snapshot(jobs, devs, placement=placement, allox_window=window)
    rematched = allox_rematch(snap, pass_only(snap))
    assert [s.job_id for s in rematched.starts] == [expected_start]
    assert decide(snap).starts == rematched.starts


def test_rematch_respects_quotas_of_the_jobs_it_adds() -> None:
    # Bob may hold no GPU at all: his job is never started, even if it suits the K80 best.
    from scheduler.core.types import Account, Quota

    devs = devices({"nk": ("k80", 1)}, SPEED)
    jobs = [
        pending(1, 1, user="alice", throughputs=speeds(k80=0.1)),
        pending(2, 1, user="bob", throughputs=speeds(k80=0.9)),
    ]
    users = [Account("alice"), Account("bob", quota=Quota(max_gpus=0))]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX, users=users)
    rematched = allox_rematch(snap, pass_only(snap))
    assert [s.job_id for s in rematched.starts] == [1]


def test_rematch_drops_a_preemption_whose_devices_no_start_uses() -> None:
    # A queue-0 job preempts a queue-1 job on the only V100; the rematch may give that V100
    # to someone else, but never preempts for nothing.
    devs = devices({"nv": ("v100", 1)}, SPEED)
    victim = running(
        9,
        (0,),
        attained_service=50_000.0,
        service_since_promotion=50_000.0,
        queue_level=1,
        started_at=0.0,
    )
    newcomer = pending(1, 1)
    snap = snapshot([victim, newcomer], devs, placement=PlacementKind.ALLOX)
    base = pass_only(snap)
    rematched = allox_rematch(snap, base)
    used = {d for s in rematched.starts for d in s.device_ids}
    for p in rematched.preemptions:
        assert set(snap.job_by_id[p.job_id].devices) & used
    from scheduler.core.invariants import check_decisions

    check_decisions(snap, rematched)


def test_rematch_never_hands_a_patient_jobs_start_to_another_job(monkeypatch) -> None:
    monkeypatch.setattr("scheduler.policies.allox.PATIENCE_THRESHOLDS", 1.0)
    # The head job has waited an hour (the first queue threshold): AlloX may not make it
    # wait longer for a better device, even though job 2 suits the K80 far better.
    devs = devices({"nk": ("k80", 1)}, SPEED)
    jobs = [
        pending(1, 1, throughputs=speeds(k80=0.1), waiting_since_promotion=3_600.0),
        pending(2, 1, throughputs=speeds(k80=0.9)),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    rematched = allox_rematch(snap, pass_only(snap))
    assert [s.job_id for s in rematched.starts] == [1]


def test_alpha_does_not_depend_on_the_order_the_snapshot_lists_jobs_in() -> None:
    # Users a (1 + 1 + 3 of 11 GPUs) and b (5 of 11) have equal shares; a running float sum
    # rounded them differently per order, so α admitted a or b depending on the listing.
    from dataclasses import replace as replace_
    from itertools import permutations

    devs = devices({"n1": ("v100", 11)})
    runs = [
        running(1, [0], user="a"),
        running(2, [1], user="a"),
        running(3, [2, 3, 4], user="a"),
        running(4, [5, 6, 7, 8, 9], user="b"),
    ]
    waiting = [pending(10, 1, user="a", submit_time=100.0), pending(11, 1, user="b")]
    base = snapshot(runs + waiting, devs, placement=PlacementKind.ALLOX, allox_alpha=0.5)
    outcomes = set()
    for order in permutations(runs):
        snap = replace_(base, jobs=(*order, *waiting))
        scores = user_scores(snap)
        assert scores["a"] == scores["b"]
        outcomes.add(tuple(decide(snap).starts))
    assert len(outcomes) == 1


@pytest.mark.parametrize("extra_v100", [False, True])
def test_a_victims_device_goes_to_the_job_that_claimed_it(extra_v100: bool) -> None:
    # Job 1 (queue 0, promoted, V100 only) preempts job 5 (queue 6) for its V100. The AlloX
    # placer used to give that V100 to job 8 (queue 8, 100x slower on the K80) and hold job
    # 1: a preemption for a job behind the victim, whose reason named job 8.
    devs = devices(
        {"n1": ("v100", 1), "n2": ("k80", 1), **({"n3": ("v100", 1)} if extra_v100 else {})},
        {"v100": 1.0, "k80": 0.4},
    )
    jobs = [
        running(5, [0], user="v", attained_service=1.3e5, service_since_promotion=1.3e5),
        pending(
            1,
            1,
            user="p",
            accepted_types=("v100",),
            submit_time=0.0,
            pending_since=0.0,
            attained_service=5e6,
        ),
        pending(
            8,
            1,
            user="q",
            throughputs=(("k80", 0.01), ("v100", 1.0)),
            attained_service=5e5,
            service_since_promotion=5e5,
            executed_since_promotion=1.0,
        ),
    ]
    if extra_v100:
        jobs.append(running(7, [2], user="p", started_at=9_990.0))
    snap = snapshot(
        jobs,
        devs,
        placement=PlacementKind.ALLOX,
        gpulab_defaults=True,
        allox_efficiency_gate=0.0,
        finished=[6e5] * 90 + [1e7] * 10,
        starvation_seconds=0.0,
        allox_alpha=1.0,
    )
    decisions = decide(snap)
    assert started(decisions)[1] == (0,)
    assert preempted(decisions) == {5: 1}
    assert "job 1 in queue 0" in decisions.preemptions[0].reason


@pytest.mark.parametrize(
    ("k80_speed", "alpha", "reason"),
    [
        # α serves one user first, then the other on what is left: both start.
        (0.9, 0.5, None),
        (0.9, 1.0, None),  # both start
        # AlloX expects job 3 to finish sooner after job 1 on the V100 than on the K80.
        (0.4, 1.0, "WaitingForFasterType: expected to finish sooner on a v100 than on a free k80"),
    ],
)
def test_a_job_allox_holds_while_a_device_it_accepts_is_free_says_why(
    k80_speed: float, alpha: float, reason: str | None
) -> None:
    # Both used to read "WaitingForResources: needs 1 × GPU" next to a free K80.
    devs = devices(V100_K80, {"v100": 1.0, "k80": k80_speed})
    jobs = [pending(1, 1, user="bob"), pending(3, 1, user="alice")]
    snap = snapshot(
        jobs, devs, placement=PlacementKind.ALLOX, gpulab_defaults=True, allox_alpha=alpha
    )
    decisions = decide(snap)
    assert 1 in started(decisions)
    assert held(decisions).get(3) == reason


def test_a_checkpointing_jobs_devices_count_in_its_users_share() -> None:
    # Alice's preempted job still holds 2 of 4 GPUs while it checkpoints: her share is
    # half the cluster until it lets go, not nothing.
    from dataclasses import replace as replace_

    from scheduler.core.types import StoppingJob

    devs = devices({"n1": ("v100", 4)}, SPEED)
    snap = snapshot([running(1, (0,), user="bob")], devs, busy=[2, 3])
    snap = replace_(snap, stopping_jobs=(StoppingJob(9, "alice", None, (2, 3)),))
    assert user_scores(snap) == {"bob": 0.25, "alice": 0.5}
