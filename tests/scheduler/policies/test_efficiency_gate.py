"""Backlog prices and the efficiency gate (scheduler/policies/prices.py, allox.efficiency_gate),
and the starvation guard on heterogeneous devices (no Django)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.types import (
    Consolidation,
    Decisions,
    Device,
    Hold,
    PlacementKind,
    Reason,
    ReasonCode,
    Snapshot,
)
from scheduler.policies import allox, decide
from scheduler.policies.las import NO_PREEMPTION
from scheduler.policies.prices import backlog_prices
from tests.scheduler.builders import devices, held, pending, preempted, running, snapshot, started

SPEED = {"v100": 1.0, "k80": 0.3}
# Relative speeds (v100, k80) of two Gavel models: a Recommendation model runs faster on a
# K80 than on a V100, a ResNet-50 at a seventh of its V100 speed.
RECOMMENDATION = (("k80", 1.4), ("v100", 1.0))
RESNET = (("k80", 0.14), ("v100", 1.0))


def profile(pairs: tuple[tuple[str, float], ...]) -> dict[str, float]:
    return dict(pairs)


def test_prices_put_each_model_on_the_type_where_it_is_worth_most() -> None:
    devs = devices({"nv": ("v100", 2), "nk": ("k80", 2)}, SPEED)
    # Recommendation work fills the K80s and spills onto the V100s, so it is indifferent
    # between them: the K80 is priced at 1.4 V100s, and a ResNet makes 0.1 of its V100 value
    # there.
    prices = backlog_prices([(profile(RECOMMENDATION), 3000.0), (profile(RESNET), 1000.0)], devs)
    assert prices is not None
    assert prices.prices == pytest.approx({"v100": 1.0 / 1.4, "k80": 1.0})
    assert prices.efficiency(profile(RESNET)) == pytest.approx({"v100": 1.0, "k80": 0.1})
    assert prices.eligible(profile(RESNET), 0.9) == ("v100",)
    assert prices.eligible(profile(RECOMMENDATION), 0.9) == ("k80", "v100")
    # A gate of 0 keeps every type a job can run on.
    assert prices.eligible(profile(RESNET), 0.0) == ("k80", "v100")


def test_prices_need_two_types_and_some_work() -> None:
    one_type = devices({"nv": ("v100", 2)}, SPEED)
    two_types = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    assert backlog_prices([(profile(RESNET), 1000.0)], one_type) is None
    assert backlog_prices([], two_types) is None
    assert backlog_prices([(profile(RESNET), 0.0)], two_types) is None


def test_with_little_work_for_it_the_k80_is_shared_out() -> None:
    # Not enough Recommendation work to fill the K80s: the LP gives ResNet the rest of
    # them, so at these prices a ResNet is efficient on a K80 too.
    devs = devices({"nv": ("v100", 2), "nk": ("k80", 2)}, SPEED)
    prices = backlog_prices([(profile(RECOMMENDATION), 1000.0), (profile(RESNET), 1000.0)], devs)
    assert prices is not None
    assert prices.eligible(profile(RESNET), 0.9) == ("k80", "v100")


def test_a_type_nobody_can_use_costs_nothing_and_is_open_to_all() -> None:
    devs = (Device(0, "a", "v100", 1.0), Device(1, "b", "k80", 0.3))
    prices = backlog_prices([({"v100": 1.0}, 1000.0)], devs)
    assert prices is not None
    assert prices.prices["k80"] == 0.0
    assert prices.efficiency({"v100": 1.0, "k80": 0.1}) == {"v100": 1.0, "k80": 1.0}


def _queue(resnets: int, recommendations: int = 3) -> list:
    """A ResNet job busy on device 0; waiting: `resnets` ResNet jobs, then Recommendation
    jobs (enough of them that the K80 is contested)."""
    jobs = [running(9, (0,), throughputs=RESNET, started_at=9_999.0)]
    jobs += [pending(i, 1, throughputs=RESNET) for i in range(1, resnets + 1)]
    jobs += [
        pending(resnets + 1 + i, 1, throughputs=RECOMMENDATION) for i in range(recommendations)
    ]
    return jobs


def test_under_a_queue_a_waiting_job_only_takes_types_it_is_efficient_on() -> None:
    # One K80 free, four jobs waiting: the K80 goes to a Recommendation job, and the ResNet
    # job (first in the order) waits for a V100 instead of crawling at 0.14x.
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    snap = snapshot(_queue(1), devs, placement=PlacementKind.ALLOX)
    narrowed = allox.efficiency_gate(snap).snapshot
    assert narrowed.job_by_id[1].accepted_types == ("v100",)
    assert narrowed.job_by_id[2].accepted_types == ()  # efficient on both: unchanged
    assert narrowed.job_by_id[9] == snap.job_by_id[9]  # running jobs are left alone
    decisions = decide(snap)
    assert len(started(decisions)) == 1
    assert set(started(decisions)) <= {2, 3, 4}
    hold = {h.job_id: h.reason for h in decisions.holds}[1]
    assert hold.code is ReasonCode.WAITING_FOR_RESOURCES
    assert "v100" in hold.detail


def test_without_a_queue_or_without_allox_nothing_is_narrowed() -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 2)}, SPEED)
    # Two K80s free for two waiting jobs: no queue, both start.
    room = snapshot(_queue(1, 1), devs, placement=PlacementKind.ALLOX)
    assert allox.efficiency_gate(room).snapshot is room
    assert set(started(decide(room))) == {1, 2}
    crowded = _queue(2)
    best_fit = snapshot(crowded, devs, placement=PlacementKind.BEST_FIT)
    assert allox.efficiency_gate(best_fit).prices is None


def test_the_gate_can_be_switched_off() -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    snap = snapshot(_queue(1), devs, placement=PlacementKind.ALLOX, allox_efficiency_gate=0.0)
    assert allox.efficiency_gate(snap).prices is None


NOW = 10_000.0


def _behind_a_starving_v100_job() -> list:
    """Two V100s (one busy in queue 0) and two free K80s. Job 1 (2 × V100, queue 0) has
    waited 5000 s: starving, and blocked (its only possible victim is in its own queue).
    Behind it, in queue 3: job 2 wants a K80, job 3 a V100."""
    lower = {
        "pending_since": NOW - 10.0,
        "attained_service": 20_000.0,
        "service_since_promotion": 20_000.0,
        "queue_level": 3,
    }
    return [
        running(9, (0,), accepted_types=("v100",)),
        pending(1, 2, accepted_types=("v100",), pending_since=NOW - 5000.0),
        pending(2, 1, accepted_types=("k80",), **lower),
        pending(3, 1, accepted_types=("v100",), **lower),
    ]


@pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])
def test_a_starving_job_keeps_only_devices_of_the_types_it_takes(
    placement: PlacementKind,
) -> None:
    devs = devices({"nv": ("v100", 2), "nk": ("k80", 2)}, SPEED)
    snap = snapshot(
        _behind_a_starving_v100_job(), devs, now=NOW, placement=placement, gpulab_defaults=True
    )
    decisions = decide(snap)
    reasons = {h.job_id: h.reason for h in decisions.holds}
    # The K80 job is not in job 1's way; the V100 job would take the V100 job 1 waits for.
    assert set(started(decisions)) == {2}
    assert reasons[3].code is ReasonCode.RESERVED
    assert "job 1" in reasons[3].detail


@pytest.mark.parametrize(("gpus", "preempts"), [(2, True), (1, False)])
def test_only_a_multi_gpu_job_is_exempted_by_the_starvation_guard(
    gpus: int, preempts: bool
) -> None:
    # Both V100s run jobs one queue below job 1, which has waited 5000 s. The margin (3
    # queues) keeps an ordinary waiting job from preempting them; a starving job is exempt.
    # A single-GPU job never starves (`las.starving_jobs`): it takes the next V100 to free.
    one_below = {"attained_service": 4000.0, "service_since_promotion": 4000.0, "queue_level": 1}
    jobs = [
        running(8, (0,), **one_below),
        running(9, (1,), **one_below),
        pending(1, gpus, pending_since=NOW - 5000.0),
    ]
    devs = devices({"nv": ("v100", 2)}, SPEED)
    decisions = decide(snapshot(jobs, devs, now=NOW, gpulab_defaults=True))
    assert bool(decisions.preemptions) is preempts


def test_a_device_the_backlog_needs_for_others_is_left_free_rather_than_wasted() -> None:
    # Long Recommendation work holds a K80 and will need K80 time for long, so a K80 is worth
    # 1.4 V100s. Two ResNet jobs wait; the V100 is busy for long. Without the gate AlloX
    # would start a ResNet on the free K80 at 0.14x; with it the ResNets wait for the V100.
    # (Expected remaining work follows the shipped prior's conditional sizes: 22e6 GPU-s for
    # the Recommendation job, 4.1e6 for the running ResNet, 0.15e6 per waiting one.)
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 2)}, SPEED)
    jobs = [
        running(9, (0,), throughputs=RESNET, attained_service=1e6),
        running(10, (1,), throughputs=RECOMMENDATION, attained_service=1e7),
        pending(1, 1, throughputs=RESNET),
        pending(2, 1, throughputs=RESNET),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    assert started(decide(snap)) == {}
    off = snapshot(jobs, devs, placement=PlacementKind.ALLOX, allox_efficiency_gate=0.0)
    assert started(decide(off)) == {1: (2,)}


def _resnet_on_a_k80(**k80_job: object) -> list:
    """A ResNet on the V100 (device 0) and one on the K80 (device 1, at 0.14x); four
    Recommendation jobs wait, more K80 work than the K80 can do, so a K80 is worth 1.4
    V100s and the ResNet on it makes 0.1 of what the Recommendation jobs would."""
    return [
        running(8, (0,), throughputs=RESNET),
        running(9, (1,), throughputs=RESNET, **k80_job),
        *(pending(i, 1, throughputs=RECOMMENDATION) for i in range(1, 5)),
    ]


def _evict(snap: Snapshot, classes: dict[int, int]) -> Decisions:
    """`evict_inefficient` after a pass that started nothing (every waiting job held for
    room), with the preemption classes given: the eviction step on its own."""
    gate = allox.efficiency_gate(snap)
    waiting = [job.id for job in snap.jobs if not job.is_running]
    holds = tuple(
        Hold(job_id, Reason(ReasonCode.WAITING_FOR_RESOURCES, "needs 1 × GPU"), place)
        for place, job_id in enumerate(waiting, 1)
    )
    order = tuple(waiting) + tuple(job.id for job in snap.jobs if job.is_running)
    return allox.evict_inefficient(gate, Decisions(holds=holds, order=order), classes)


# (classes of the waiting Recommendation jobs 1-4, class of the ResNet on the K80) -> evicted.
# Eviction is a preemption and follows the pass's rule: the victim's class strictly greater.
@pytest.mark.parametrize(
    ("waiting_class", "victim_class", "evicts"),
    [
        (0, 1, True),  # a lower queue: the waiting job may preempt it
        (0, 0, False),  # the same queue: Tiresias never preempts within a queue
        (1, 0, False),  # a higher queue: never
        (NO_PREEMPTION, 1, False),  # patience not served yet
    ],
)
def test_a_job_that_wastes_its_device_gives_it_to_a_waiting_job_that_may_preempt_it(
    waiting_class: int, victim_class: int, evicts: bool
) -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    snap = snapshot(_resnet_on_a_k80(), devs, placement=PlacementKind.ALLOX)
    classes = {8: 0, 9: victim_class, **dict.fromkeys(range(1, 5), waiting_class)}
    decisions = _evict(snap, classes)
    if not evicts:
        assert started(decisions) == {}
        assert preempted(decisions) == {}
        return
    assert started(decisions) == {1: (1,)}
    assert preempted(decisions) == {9: 1}
    reason = decisions.preemptions[0].reason
    assert "10%" in reason and "efficiency gate" in reason
    # The ResNet on the V100 is where the backlog wants it: it keeps running.
    assert set(held(decisions)) == {2, 3, 4}


def test_a_job_deep_in_the_queues_does_not_evict_a_fresh_one() -> None:
    # A Recommendation job with 5e6 GPU-s attained (queue 11) waits for a K80 that a fresh
    # ResNet (queue 0) uses at a tenth of its worth. Before eviction followed the pass's
    # rule it preempted the queue-0 job (the audit's evict.py).
    devs = devices({"nv": ("v100", 2), "nk": ("k80", 1)})
    jobs = [
        running(1, [0], throughputs=RESNET, attained_service=10.0),
        running(2, [1], throughputs=RESNET, attained_service=10.0),
        running(3, [2], throughputs=RESNET, attained_service=10.0),
        pending(
            9,
            1,
            throughputs=RECOMMENDATION,
            pending_since=9_990.0,
            attained_service=5e6,
            service_since_promotion=5e6,
            executed_since_promotion=5e6,
            queue_level=11,
        ),
    ]
    decisions = decide(snapshot(jobs, devs, placement=PlacementKind.ALLOX, gpulab_defaults=True))
    assert preempted(decisions) == {}
    assert started(decisions) == {}


@pytest.mark.parametrize(
    ("settings", "k80_job"),
    [
        ({"allox_efficiency_gate": 0.0}, {}),  # gate off: no prices, no eviction
        ({"placement": PlacementKind.BEST_FIT}, {}),  # the gate is AlloX's
        ({"min_runtime": 300.0}, {"started_at": 10_000.0 - 60.0}),  # inside its min runtime
        ({}, {"preemptible": False}),
    ],
)
def test_no_eviction_without_the_gate_or_from_a_protected_job(
    settings: dict, k80_job: dict
) -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    settings = {"placement": PlacementKind.ALLOX, **settings}
    decisions = decide(snapshot(_resnet_on_a_k80(**k80_job), devs, **settings))
    assert started(decisions) == {}
    assert preempted(decisions) == {}


def test_a_gang_is_not_evicted() -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 2)}, SPEED)
    jobs = [
        running(8, (0,), throughputs=RESNET),
        running(9, (1, 2), throughputs=RESNET),
        *(pending(i, 1, throughputs=RECOMMENDATION) for i in range(10, 20)),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    # At these prices the ResNet gang wastes its K80s (a single-GPU job there would go).
    prices = allox.efficiency_gate(snap).prices
    assert prices is not None
    assert prices.efficiency(profile(RESNET))["k80"] == pytest.approx(0.1)
    assert preempted(decide(snap)) == {}


# A model at half its V100 speed on a K80: at prices where a K80 is worth 1.4 V100s it is
# 36 % efficient there, so the gate keeps it for V100s but a K80 may be lent to it.
HALF_ON_K80 = (("k80", 0.5), ("v100", 1.0))


def _k80_free_for_v100_jobs() -> list:
    return [
        running(9, (0,), throughputs=RESNET, attained_service=1e5),
        running(10, (1,), throughputs=RECOMMENDATION, attained_service=3e6),
        pending(1, 1, throughputs=HALF_ON_K80),
        pending(2, 1, throughputs=HALF_ON_K80),
    ]


def test_a_device_nobody_waits_for_is_lent_to_a_job_efficient_enough_there() -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 2)}, SPEED)
    snap = snapshot(_k80_free_for_v100_jobs(), devs, placement=PlacementKind.ALLOX)
    assert allox.efficiency_gate(snap).snapshot.job_by_id[1].accepted_types == ("v100",)
    decisions = decide(snap)
    assert started(decisions) == {1: (2,)}
    assert "efficiency gate" in held(decisions)[2]
    # Not lent to a job below the floor: a ResNet there makes 0.1 of the K80's worth
    # (test_a_device_the_backlog_needs_for_others_is_left_free_rather_than_wasted).


@pytest.mark.parametrize(
    ("consolidation", "lent"),
    [("any", {1: (3, 4)}), ("required", {})],  # the two free K80s are on two nodes
)
def test_idle_devices_are_lent_to_a_gang_that_fits_them_under_its_consolidation_rule(
    consolidation: str, lent: dict[int, tuple[int, ...]]
) -> None:
    # Only single-GPU jobs were lent devices: a 2-GPU job the gate keeps for V100s waited
    # while two K80s sat idle (on an empty 1,024-GPU cluster, 250 GPUs).
    devs = devices(
        {"nv": ("v100", 2), "nk": ("k80", 1), "nk1": ("k80", 1), "nk2": ("k80", 1)}, SPEED
    )
    jobs = [
        running(9, (0, 1), throughputs=RESNET, attained_service=1e5),
        running(10, (2,), throughputs=RECOMMENDATION, attained_service=3e6),
        pending(1, 2, throughputs=HALF_ON_K80, consolidation=Consolidation(consolidation)),
        pending(2, 1, throughputs=RESNET),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    assert allox.efficiency_gate(snap).snapshot.job_by_id[1].accepted_types == ("v100",)
    assert started(decide(snap)) == lent


def test_the_gate_never_narrows_a_job_to_a_type_too_small_to_hold_it() -> None:
    # A 2-GPU job most efficient on V100s, in a lab with one V100: narrowed to it, it was
    # held "TypeUnavailable: the cluster has fewer than 2 schedulable v100" for as long as
    # any job waited. It keeps its K80s and starts there.
    devs = devices(
        {"nv": ("v100", 1), "nk": ("k80", 1), "nk1": ("k80", 1), "nk2": ("k80", 1)}, SPEED
    )
    jobs = [
        running(9, (0,), throughputs=RESNET, attained_service=1e5),
        running(10, (1,), throughputs=RECOMMENDATION, attained_service=3e6),
        pending(1, 2, throughputs=HALF_ON_K80),
        pending(2, 1, throughputs=RESNET),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    gate = allox.efficiency_gate(snap)
    assert gate.prices is not None
    assert gate.snapshot.job_by_id[2].accepted_types == ("v100",)  # the gate is on
    assert gate.snapshot.job_by_id[1].accepted_types == ()
    assert started(decide(snap)) == {1: (2, 3)}


def test_a_lent_device_goes_back_when_a_job_the_gate_sends_there_waits() -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 2)}, SPEED)
    jobs = [
        running(9, (0,), throughputs=RESNET, attained_service=1e5),
        running(10, (1,), throughputs=RECOMMENDATION, attained_service=1e7),
        running(1, (2,), throughputs=HALF_ON_K80),  # lent the K80 an earlier round
        pending(2, 1, throughputs=HALF_ON_K80),
        pending(3, 1, throughputs=RECOMMENDATION),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    # Taken back only across queues, as any preemption (the lent job in a lower queue).
    decisions = _evict(snap, {9: 0, 10: 0, 1: 1, 2: 0, 3: 0})
    assert started(decisions) == {3: (2,)}
    assert preempted(decisions) == {1: 3}
    assert preempted(_evict(snap, {9: 0, 10: 0, 1: 0, 2: 0, 3: 0})) == {}


PROFILES = (RESNET, RECOMMENDATION, HALF_ON_K80)


@st.composite
def crowded_heterogeneous(draw: st.DrawFn) -> tuple:
    """V100s and K80s, every device busy with a single-GPU job of a random model (some
    inside their minimum runtime), and more single-GPU jobs of random models waiting."""
    v100s, k80s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    devs = devices({"nv": ("v100", v100s), "nk": ("k80", k80s)}, SPEED)
    jobs = [
        running(
            100 + d.id,
            (d.id,),
            throughputs=draw(st.sampled_from(PROFILES)),
            started_at=draw(st.sampled_from([0.0, NOW - 60.0])),
        )
        for d in devs
    ]
    jobs += [
        pending(i, 1, throughputs=draw(st.sampled_from(PROFILES)))
        for i in range(1, draw(st.integers(1, 8)) + 1)
    ]
    return devs, jobs, draw(st.sampled_from([0.9, 1.0]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=crowded_heterogeneous())
def test_every_eviction_hands_a_wasted_device_to_a_job_the_gate_sends_there(case: tuple) -> None:
    devs, jobs, gate_value = case
    snap = snapshot(
        jobs,
        devs,
        now=NOW,
        placement=PlacementKind.ALLOX,
        allox_efficiency_gate=gate_value,
        min_runtime=300.0,
    )
    decisions = decide(snap)  # raises on unsafe decisions
    gate = allox.efficiency_gate(snap)
    starts = started(decisions)
    for preempt in decisions.preemptions:
        if "efficiency gate" not in preempt.reason:
            continue
        assert gate.prices is not None
        victim = snap.job_by_id[preempt.job_id]
        device = snap.device_by_id[victim.devices[0]]
        assert NOW - victim.started_at >= 300.0
        waste = gate.prices.efficiency(profile(victim.throughputs))[device.device_type]
        assert waste < allox.EVICTION_FRACTION * gate_value
        taker = gate.snapshot.job_by_id[preempt.by_job_id]
        # An eviction is a preemption: only across queues (all here are in queue 0).
        assert victim.queue_level > taker.queue_level
        assert starts[taker.id] == victim.devices
        assert not taker.accepted_types or device.device_type in taker.accepted_types


def test_the_crowded_cases_do_evict() -> None:
    """The property above is not vacuous: its generator's kind of case evicts."""
    devs = devices({"nv": ("v100", 2), "nk": ("k80", 2)}, SPEED)
    jobs = [
        running(100, (0,), throughputs=RESNET),
        running(101, (1,), throughputs=RESNET),
        running(102, (2,), throughputs=RESNET),
        running(103, (3,), throughputs=RECOMMENDATION),
        *(pending(i, 1, throughputs=RECOMMENDATION) for i in range(1, 6)),
    ]
    snap = snapshot(jobs, devs, placement=PlacementKind.ALLOX)
    # Running jobs one queue down, so the waiting ones may preempt them.
    classes = {job.id: 1 if job.is_running else 0 for job in jobs}
    assert preempted(_evict(snap, classes)) == {102: 1}


def test_type_speeds_list_types_fastest_first_whatever_order_the_devices_come_in() -> None:
    # A job's default order of preference (and the held reason that names the types the
    # gate leaves it) came from this dict's order, which followed the device list: the
    # same cluster listed in another order gave another reason (found by hypothesis).
    cluster = [
        Device(0, "n0", "rtx3090", 0.5),
        Device(1, "n1", "a100", 0.5),
        Device(2, "n2", "a100", 2.0),
        Device(3, "n3", "v100", 1.0),
        Device(4, "n4", "k80", 0.5),
    ]
    for ordering in (cluster, cluster[::-1], cluster[1:] + cluster[:1]):
        assert list(allox._type_speeds(ordering)) == ["a100", "v100", "k80", "rtx3090"]
