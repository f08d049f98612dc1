"""Guaranteed GPUs per group (scheduler/policies/guarantees.py): reclaim, protection, cover.

Every case runs with gpulab's defaults (patience 600 s, queue margin 3, one victim per
waiting job, the starvation guard), the settings a guarantee has to cut through, under
both Tiresias policies and both placements.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.core.types import Account, JobPhase, PlacementKind, Quota, StoppingJob
from scheduler.policies import decide
from scheduler.policies.guarantees import guarantee_cover
from tests.scheduler.builders import devices, held, pending, preempted, running, snapshot, started
from tests.scheduler.test_properties import PLACEMENTS, PROPERTY_SETTINGS, snapshots

EIGHT = devices({"n1": ("a100", 4), "n2": ("a100", 4)})
NOW = 100_000.0
TIRESIAS = pytest.mark.parametrize("policy", ["las", "gittins"])
PLACED = pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])


def nlp_fills_the_cluster(**fields: object) -> list:  # type: ignore[type-arg]
    """Eight 1-GPU jobs of group nlp, past their minimum runtime, an hour of service each."""
    fields.setdefault("attained_service", 3600.0)
    fields.setdefault("service_since_promotion", 3600.0)
    return [
        running(10 + i, (i,), user="bob", group="nlp", started_at=NOW - 3600.0, **fields)
        for i in range(8)
    ]


def groups(vision: int = 0, nlp: int = 0) -> list[Account]:
    return [Account("vision", guaranteed_gpus=vision), Account("nlp", guaranteed_gpus=nlp)]


def vision_job(job_id: int = 1, gpus: int = 4, **fields: object):  # type: ignore[no-untyped-def]
    # Submitted a minute ago: its patience (600 s) is not served, so plain LAS would not
    # let it preempt anyone yet.
    fields.setdefault("submit_time", NOW - 60.0)
    fields.setdefault("pending_since", NOW - 60.0)
    return pending(job_id, gpus, user="carol", group="vision", **fields)


@TIRESIAS
@PLACED
def test_a_group_inside_its_guarantee_takes_its_gpus_back_at_once(
    policy: str, placement: PlacementKind
) -> None:
    snap = snapshot(
        [*nlp_fills_the_cluster(), vision_job()],
        EIGHT,
        now=NOW,
        policy=policy,
        placement=placement,
        groups=groups(vision=4),
        gpulab_defaults=True,
    )
    decisions = decide(snap)
    # Four victims for one waiting job: past the victim cap of 1, the patience and the
    # queue margin, because a guarantee does not wait for churn control.
    assert len(started(decisions)[1]) == 4
    assert sorted(preempted(decisions).values()) == [1, 1, 1, 1]
    reason = next(p.reason for p in decisions.preemptions)
    assert reason == (
        "job 1 of group vision takes back GPUs its group is guaranteed; this job runs beyond "
        "what group nlp is guaranteed"
    )


@TIRESIAS
@PLACED
def test_without_the_guarantee_the_same_job_waits(policy: str, placement: PlacementKind) -> None:
    """The control: the guarantee, not LAS, preempts above."""
    snap = snapshot(
        [*nlp_fills_the_cluster(), vision_job()],
        EIGHT,
        now=NOW,
        policy=policy,
        placement=placement,
        groups=groups(),
        gpulab_defaults=True,
    )
    decisions = decide(snap)
    assert started(decisions) == {} and preempted(decisions) == {}
    assert 1 in held(decisions)


@TIRESIAS
@PLACED
def test_jobs_inside_a_guarantee_are_nobodys_victims(policy: str, placement: PlacementKind) -> None:
    # Vision holds its 4 guaranteed GPUs with jobs deep in the queues; nlp's fresh 4-GPU job
    # has waited past every clock. Plain LAS would preempt vision (see the control).
    vision_running = [
        running(
            20 + i,
            (i,),
            user="carol",
            group="vision",
            started_at=NOW - 86_400.0,
            attained_service=500_000.0,
            service_since_promotion=500_000.0,
        )
        for i in range(4)
    ]
    nlp_running = [
        running(30 + i, (4 + i,), user="bob", group="nlp", started_at=NOW - 3600.0)
        for i in range(4)
    ]
    waiting = pending(2, 4, user="bob", group="nlp", submit_time=0.0, pending_since=0.0)
    jobs = [*vision_running, *nlp_running, waiting]

    def run(vision: int):  # type: ignore[no-untyped-def]
        snap = snapshot(
            jobs,
            EIGHT,
            now=NOW,
            policy=policy,
            placement=placement,
            groups=groups(vision=vision),
            gpulab_defaults=True,
        )
        return decide(snap)

    protected = run(vision=4)
    assert preempted(protected) == {} and started(protected) == {}
    assert set(preempted(run(vision=0))) & {20, 21, 22, 23}  # the control


@TIRESIAS
def test_only_what_a_group_borrows_beyond_its_guarantee_is_reclaimed(policy: str) -> None:
    # Vision is guaranteed 2 and runs 6: its two best jobs (least service) are covered, the
    # other four borrowed. Nlp, guaranteed 4 and running nothing, reclaims 2 of the borrowed.
    vision_running = [
        running(
            20 + i,
            (i,),
            user="carol",
            group="vision",
            started_at=NOW - 3600.0,
            attained_service=1000.0 * (i + 1),
            service_since_promotion=1000.0 * (i + 1),
        )
        for i in range(6)
    ]
    others = [running(40, (6, 7), user="dave", group=None, started_at=NOW - 60.0)]
    waiting = pending(2, 2, user="bob", group="nlp", submit_time=NOW, pending_since=NOW)
    snap = snapshot(
        [*vision_running, *others, waiting],
        EIGHT,
        now=NOW,
        policy=policy,
        groups=groups(vision=2, nlp=4),
        gpulab_defaults=True,
    )
    decisions = decide(snap)
    victims = set(preempted(decisions))
    assert len(victims) == 2 and victims <= {22, 23, 24, 25}
    assert 40 not in victims  # inside its minimum runtime
    assert 2 in started(decisions)


def test_the_lowest_priority_borrowers_go_first() -> None:
    vision_running = [
        running(
            20 + i,
            (i,),
            user="carol",
            group="vision",
            started_at=NOW - 3600.0,
            attained_service=1000.0 * (i + 1),
            service_since_promotion=1000.0 * (i + 1),
        )
        for i in range(8)
    ]
    waiting = pending(2, 1, user="bob", group="nlp", submit_time=NOW, pending_since=NOW)
    snap = snapshot(
        [*vision_running, waiting],
        EIGHT,
        now=NOW,
        groups=groups(vision=2, nlp=4),
        gpulab_defaults=True,
        queue_thresholds=(),  # one queue: FIFO by entry time, so job 27 is last
    )
    assert preempted(decide(snap)) == {27: 2}


@TIRESIAS
def test_a_reclaim_waits_for_the_victims_minimum_runtime_and_wakes_the_loop(policy: str) -> None:
    started_at = NOW - 100.0  # min runtime 300 s: preemptible at NOW + 200
    fresh = [
        running(10 + i, (i,), user="bob", group="nlp", started_at=started_at) for i in range(8)
    ]
    snap = snapshot(
        [*fresh, vision_job()],
        EIGHT,
        now=NOW,
        policy=policy,
        groups=groups(vision=4),
        gpulab_defaults=True,
    )
    decisions = decide(snap)
    assert preempted(decisions) == {} and 1 in held(decisions)
    assert decisions.wake_at == started_at + 300.0
    later = decide(replace(snap, now=started_at + 300.0))
    assert len(preempted(later)) == 4 and 1 in started(later)


def test_a_job_bigger_than_what_is_left_of_the_guarantee_borrows_and_smaller_ones_backfill() -> (
    None
):
    big = vision_job(1, gpus=8)
    small = vision_job(2, gpus=2, submit_time=NOW - 30.0, pending_since=NOW - 30.0)
    snap = snapshot(
        [*nlp_fills_the_cluster(), big, small],
        EIGHT,
        now=NOW,
        groups=groups(vision=4),
        gpulab_defaults=True,
    )
    assert guarantee_cover(snap, snap.jobs) == {2}
    decisions = decide(snap)
    assert 2 in started(decisions) and 1 in held(decisions)
    assert len(preempted(decisions)) == 2


def test_gpus_a_stopping_job_still_holds_count_against_the_guarantee() -> None:
    stopping = StoppingJob(id=50, user="carol", group="vision", devices=(7,))
    jobs = nlp_fills_the_cluster()[:7]
    snap = snapshot(
        [*jobs, vision_job(gpus=4)],
        EIGHT,
        now=NOW,
        groups=groups(vision=4),
        gpulab_defaults=True,
        busy=[7],
    )
    snap = replace(snap, stopping_jobs=(stopping,))
    # 1 of vision's 4 guaranteed GPUs is still in use: a 4-GPU job is not covered any more.
    assert guarantee_cover(snap, snap.jobs) == frozenset()
    decisions = decide(snap)
    assert preempted(decisions) == {} and 1 in held(decisions)


def test_the_group_cap_still_holds_inside_the_guarantee() -> None:
    capped = [
        Account("vision", guaranteed_gpus=4, quota=Quota(max_gpus=2)),
        Account("nlp"),
    ]
    snap = snapshot(
        [*nlp_fills_the_cluster(), vision_job()],
        EIGHT,
        now=NOW,
        groups=capped,
        gpulab_defaults=True,
    )
    decisions = decide(snap)
    assert preempted(decisions) == {}
    assert held(decisions)[1] == "QuotaExceeded: group max GPUs 2"


def test_covered_jobs_come_first_in_the_queue() -> None:
    # Nlp's queue-0 job would be ahead of vision's demoted one under plain LAS.
    nlp_waiting = pending(2, 1, user="bob", group="nlp", submit_time=NOW - 10.0)
    vision_waiting = vision_job(
        3, gpus=1, attained_service=50_000.0, service_since_promotion=50_000.0
    )
    full = nlp_fills_the_cluster()
    for vision in (0, 1):
        snap = snapshot(
            [*full, nlp_waiting, vision_waiting],
            EIGHT,
            now=NOW,
            groups=groups(vision=vision),
            gpulab_defaults=True,
        )
        order = [job_id for job_id in decide(snap).order if job_id in (2, 3)]
        assert order == ([3, 2] if vision else [2, 3])


# ----------------------------------------------------------------------------- properties


def holding(snap, group: str) -> int:  # type: ignore[no-untyped-def]
    gpus = sum(j.num_gpus for j in snap.jobs if j.phase is JobPhase.RUNNING and j.group == group)
    return gpus + sum(len(s.devices) for s in snap.stopping_jobs if s.group == group)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("policy", ["las", "gittins"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_a_group_within_its_guarantee_never_loses_a_job_to_another_job(
    policy: str, placement: PlacementKind, data: st.DataObject
) -> None:
    snap = data.draw(snapshots(policy, placement))
    guarantee = {group.name: group.guaranteed_gpus for group in snap.groups}
    decisions = decide(snap)
    jobs = snap.job_by_id
    for preemption in decisions.preemptions:
        if preemption.by_job_id is None:
            continue  # AlloX moving a job to a faster device: the job's own gain
        group = jobs[preemption.job_id].group
        if group is not None and guarantee.get(group, 0) > 0:
            assert holding(snap, group) > guarantee[group], preemption


def test_allox_keeps_the_start_of_a_covered_job() -> None:
    """AlloX's window step gives the free GPU to dave's job, which runs 20x faster there
    and whose owner runs nothing yet (carol already runs a job); the guarantee keeps it
    for carol's vision job."""
    three = devices({"n1": ("a100", 3)})
    jobs = [
        running(10, (0,), user="bob", group="nlp", started_at=NOW - 60.0),
        running(11, (1,), user="carol", group=None, started_at=NOW - 60.0),
        vision_job(1, gpus=1, throughputs=(("a100", 0.1),)),
        pending(2, 1, user="dave", group="nlp", submit_time=NOW, throughputs=(("a100", 2.0),)),
    ]
    for vision, winner in ((1, 1), (0, 2)):
        snap = snapshot(
            jobs,
            three,
            now=NOW,
            placement=PlacementKind.ALLOX,
            groups=groups(vision=vision),
            gpulab_defaults=True,
        )
        assert set(started(decide(snap))) == {winner}, vision


# ----------------------------------------------------------------------------- sessions


def session_of(job_id: int, device_id: int, group: str, **fields: object):  # type: ignore[no-untyped-def]
    """A running interactive session: not preemptible, but reclaimable (scheduler.snapshot)."""
    fields.setdefault("started_at", NOW - 3600.0)
    return running(
        job_id, (device_id,), user="bob", group=group, preemptible=False, reclaimable=True, **fields
    )


@TIRESIAS
@PLACED
def test_a_session_beyond_its_groups_guarantee_is_reclaimed_but_batch_borrowers_go_first(
    policy: str, placement: PlacementKind
) -> None:
    # nlp (no guarantee) runs 6 sessions and 2 batch jobs; vision takes back 4.
    sessions = [session_of(10 + i, i, "nlp") for i in range(6)]
    batch = [
        running(20 + i, (6 + i,), user="bob", group="nlp", started_at=NOW - 3600.0)
        for i in range(2)
    ]
    snap = snapshot(
        [*sessions, *batch, vision_job(gpus=4)],
        EIGHT,
        now=NOW,
        policy=policy,
        placement=placement,
        groups=groups(vision=4),
        gpulab_defaults=True,
    )
    decisions = decide(snap)  # the invariants accept a reclaimed session
    victims = set(preempted(decisions))
    assert len(victims) == 4 and {20, 21} <= victims
    assert 1 in started(decisions)


@TIRESIAS
def test_a_session_is_never_preempted_by_las_nor_inside_its_groups_guarantee(policy: str) -> None:
    # vision's two sessions are inside its guarantee of 2; nlp's is beyond its (none), but
    # only LAS wants it: nlp's own fresh job, not covered by anything.
    jobs = [
        session_of(10, 0, "vision", attained_service=9e6, service_since_promotion=9e6),
        session_of(11, 1, "vision", attained_service=9e6, service_since_promotion=9e6),
        *[
            session_of(12 + i, 2 + i, "nlp", attained_service=9e6, service_since_promotion=9e6)
            for i in range(6)
        ],
        pending(1, 1, user="carol", group="nlp", submit_time=0.0, pending_since=0.0),
        vision_job(2, gpus=1),
    ]
    snap = snapshot(
        jobs, EIGHT, now=NOW, policy=policy, groups=groups(vision=2), gpulab_defaults=True
    )
    decisions = decide(snap)
    assert preempted(decisions) == {}
    assert started(decisions) == {}


def test_without_any_guarantee_a_session_is_never_preempted() -> None:
    jobs = [
        *[
            session_of(10 + i, i, "nlp", attained_service=9e6, service_since_promotion=9e6)
            for i in range(8)
        ],
        pending(1, 8, user="carol", group="vision", submit_time=0.0, pending_since=0.0),
    ]
    snap = snapshot(jobs, EIGHT, now=NOW, groups=groups(), gpulab_defaults=True)
    assert preempted(decide(snap)) == {}


def test_the_invariants_refuse_a_reclaimable_job_preempted_for_nobody() -> None:
    from scheduler.core.invariants import InvariantViolation, check_decisions
    from scheduler.core.types import Decisions, Preempt

    snap = snapshot([session_of(10, 0, "nlp")], EIGHT, now=NOW)
    moved = Decisions(preemptions=(Preempt(10, "moving to a faster GPU", None),), order=(10,))
    with pytest.raises(InvariantViolation, match="not preemptible"):
        check_decisions(snap, moved)


# ----------------------------------------------------------------------------- review cases


def test_gpus_being_given_back_expose_no_other_job_of_the_group() -> None:
    """nlp (guarantee 2) ran three jobs; one is checkpointing for vision's job. Its other
    two are its guarantee: vision's job, still waiting for the GPU, takes nothing more."""
    nlp = [running(10 + i, (i,), user="bob", group="nlp", started_at=NOW - 3600.0) for i in (0, 1)]
    stopping = StoppingJob(id=12, user="bob", group="nlp", devices=(2,), for_job=1)
    snap = snapshot(
        [*nlp, vision_job(gpus=1)],
        devices({"n1": ("a100", 3)}),
        now=NOW,
        groups=groups(vision=2, nlp=2),
        gpulab_defaults=True,
        busy=[2],
    )
    snap = replace(snap, stopping_jobs=(stopping,))
    assert guarantee_cover(snap, snap.jobs) >= {10, 11}
    assert preempted(decide(snap)) == {}


@TIRESIAS
def test_a_job_whose_victims_still_checkpoint_claims_no_more(policy: str) -> None:
    """Vision's 2-GPU job preempted one 2-GPU borrower for itself; while that one
    checkpoints (rounds every 10 s, a 30 s grace) it must not take another."""
    borrowers = [
        running(20 + i, (2 * i, 2 * i + 1), user="bob", group="nlp", started_at=NOW - 3600.0)
        for i in range(3)
    ]
    stopping = StoppingJob(id=23, user="bob", group="nlp", devices=(6, 7), for_job=1)
    snap = snapshot(
        [*borrowers, vision_job(gpus=2)],
        EIGHT,
        now=NOW,
        policy=policy,
        groups=groups(vision=2),
        gpulab_defaults=True,
        busy=[6, 7],
    )
    assert preempted(decide(replace(snap, stopping_jobs=(stopping,)))) == {}
    # The control: the same GPUs stopping for another reason (a move, a cancel).
    other = replace(stopping, for_job=None)
    assert len(preempted(decide(replace(snap, stopping_jobs=(other,))))) == 1


def test_a_reclaim_takes_the_lowest_victims_not_the_widest() -> None:
    """A 1-GPU reclaim takes one of eight 1-GPU borrowers, not the 8-GPU one."""
    sixteen = devices({"n1": ("a100", 8), "n2": ("a100", 8)})
    wide = running(
        10, range(8), user="bob", group="nlp", started_at=NOW - 3600.0,
        attained_service=8 * 3600.0, service_since_promotion=8 * 3600.0,
    )  # fmt: skip
    small = [
        running(
            11 + i,
            (8 + i,),
            user="eve",
            group="nlp",
            started_at=NOW - 3600.0,
            attained_service=72_000.0,
            service_since_promotion=72_000.0,
        )
        for i in range(8)
    ]
    snap = snapshot(
        [wide, *small, vision_job(gpus=1)], sixteen, now=NOW, groups=groups(vision=1),
        gpulab_defaults=True,
    )  # fmt: skip
    victims = preempted(decide(snap))
    assert len(victims) == 1 and 10 not in victims


def test_a_reclaim_never_takes_a_group_below_its_guarantee() -> None:
    """nlp (guarantee 4) runs an old 4-GPU job and a fresh 2-GPU one: it borrows 2, so
    only the 2-GPU job is reclaimable, even though the 4-GPU one ranks lower."""
    old = running(
        10, (0, 1, 2, 3), user="bob", group="nlp", started_at=NOW - 7200.0,
        attained_service=200_000.0, service_since_promotion=200_000.0,
    )  # fmt: skip
    fresh = running(11, (4, 5), user="bob", group="nlp", started_at=NOW - 3600.0)
    protected = running(12, (6, 7), user="dave", group=None, started_at=NOW - 60.0)
    snap = snapshot(
        [old, fresh, protected, vision_job(gpus=2)], EIGHT, now=NOW,
        groups=groups(vision=2, nlp=4), gpulab_defaults=True,
    )  # fmt: skip
    assert preempted(decide(snap)) == {11: 1}


def test_a_job_that_could_not_start_anyway_does_not_use_up_the_guarantee() -> None:
    """Carol is at her own cap: her waiting job is not covered, bob's is."""
    carol = [
        running(20 + i, (i,), user="carol", group="vision", started_at=NOW - 3600.0) for i in (0, 1)
    ]
    nlp = [
        running(30 + i, (2 + i,), user="eve", group="nlp", started_at=NOW - 3600.0)
        for i in range(6)
    ]
    carol_more = vision_job(2, gpus=2, submit_time=NOW - 120.0, pending_since=NOW - 120.0)
    bob = pending(
        3, 2, user="bob", group="vision", submit_time=NOW - 60.0, pending_since=NOW - 60.0
    )
    snap = snapshot(
        [*carol, *nlp, carol_more, bob], EIGHT, now=NOW, groups=groups(vision=4),
        users=[Account("carol", quota=Quota(max_gpus=2))], gpulab_defaults=True,
    )  # fmt: skip
    decisions = decide(snap)
    assert 3 in started(decisions)
    assert held(decisions)[2] == "QuotaExceeded: user max GPUs 2"


def test_the_starvation_guards_reservation_does_not_hold_a_covered_job() -> None:
    """Vision's 4-GPU job is starving and blocked (seven GPUs inside their minimum
    runtime); nlp's covered 1-GPU job, of a lower queue, still starts on the free GPU: its
    guarantee is its own whatever waits elsewhere. Without nlp's guarantee it is held."""
    others = [
        running(20 + i, (i,), user="dave", group="other", started_at=NOW - 100.0) for i in range(7)
    ]
    starving = pending(
        1, 4, user="carol", group="vision", submit_time=NOW - 7200.0, pending_since=NOW - 7200.0
    )
    small = pending(
        2, 1, user="bob", group="nlp", submit_time=NOW - 60.0, pending_since=NOW - 60.0,
        attained_service=20_000.0, service_since_promotion=20_000.0,
        executed_since_promotion=20_000.0,
    )  # fmt: skip
    for nlp, expected in ((2, {2: (7,)}), (0, {})):
        snap = snapshot(
            [*others, starving, small], EIGHT, now=NOW,
            groups=[*groups(vision=4, nlp=nlp), Account("other")], gpulab_defaults=True,
        )  # fmt: skip
        assert started(decide(snap)) == expected


@TIRESIAS
def test_the_efficiency_gate_does_not_narrow_a_covered_job(policy: str) -> None:
    """Vision's ResNet would be narrowed to V100s, all inside nlp's guarantee; it takes a
    borrower's K80 instead of waiting beside it."""
    mixed = devices({"a": ("v100", 4), "k": ("k80", 4)}, speed={"v100": 3.0, "k80": 1.0})
    resnet = (("v100", 3.0), ("k80", 0.4))
    rec = (("v100", 1.0), ("k80", 1.4))
    nlp = [
        running(10 + i, (i,), user="bob", group="nlp", started_at=NOW - 3600.0, throughputs=resnet)
        for i in range(4)
    ]
    other = [
        running(
            20 + i, (4 + i,), user="dave", group="other", started_at=NOW - 3600.0, throughputs=rec
        )
        for i in range(4)
    ]
    backlog = [
        pending(
            40 + i,
            1,
            user="eve",
            group="other",
            submit_time=NOW - 30.0,
            pending_since=NOW - 30.0,
            throughputs=rec,
        )
        for i in range(4)
    ]
    snap = snapshot(
        [*nlp, *other, *backlog, vision_job(gpus=1, throughputs=resnet)],
        mixed, now=NOW, policy=policy, placement=PlacementKind.ALLOX,
        groups=[*groups(vision=2, nlp=4), Account("other")], gpulab_defaults=True,
    )  # fmt: skip
    decisions = decide(snap)
    assert 1 in started(decisions) and len(preempted(decisions)) == 1


# ----------------------------------------------------------------------------- re-review


def test_the_borrowed_set_is_the_largest_that_keeps_the_guarantee() -> None:
    """nlp (guarantee 3) runs 2 + 2 + 3 GPUs: it borrows 4, lent back as the two 2-GPU
    jobs (greedy lowest-first would lend only the 3-GPU one, and vision would wait)."""
    seven = devices({"n1": ("a100", 4), "n2": ("a100", 3)})
    fresh = [
        running(10 + i, (2 * i, 2 * i + 1), user="bob", group="nlp", started_at=NOW - 3600.0)
        for i in range(2)
    ]
    old = running(
        12, (4, 5, 6), user="bob", group="nlp", started_at=NOW - 7200.0,
        attained_service=9e5, service_since_promotion=9e5,
    )  # fmt: skip
    snap = snapshot(
        [*fresh, old, vision_job(gpus=4)], seven, now=NOW,
        groups=groups(vision=4, nlp=3), gpulab_defaults=True,
    )  # fmt: skip
    assert preempted(decide(snap)) == {10: 1, 11: 1}


def test_a_groups_batch_job_is_lent_back_before_its_session() -> None:
    """nlp (guarantee 1) runs a session (4 h of service, the lowest) and a fresh batch
    job: the batch job, which checkpoints, is the one it borrows."""
    two = devices({"n1": ("a100", 2)})
    notebook = session_of(10, 0, "nlp", attained_service=14_400.0, service_since_promotion=14_400.0)
    batch = running(11, (1,), user="bob", group="nlp", started_at=NOW - 900.0)
    snap = snapshot(
        [notebook, batch, vision_job(gpus=1)], two, now=NOW,
        groups=groups(vision=1, nlp=1), gpulab_defaults=True,
    )  # fmt: skip
    assert preempted(decide(snap)) == {11: 1}


def test_a_job_with_gpus_on_their_way_and_enough_free_claims_no_more() -> None:
    """Vision's 4-GPU job preempted one 2-GPU job and has 2 free GPUs beside it: while
    that job checkpoints, no second victim."""
    nlp = [
        running(20 + i, (2 * i, 2 * i + 1), user="bob", group="nlp", started_at=NOW - 3600.0)
        for i in range(2)
    ]
    stopping = StoppingJob(id=22, user="bob", group="nlp", devices=(4, 5), for_job=1)
    snap = snapshot(
        [*nlp, vision_job(gpus=4)], EIGHT, now=NOW, groups=groups(vision=4),
        gpulab_defaults=True, busy=[4, 5],
    )  # fmt: skip
    assert preempted(decide(replace(snap, stopping_jobs=(stopping,)))) == {}


def test_covering_charges_the_owners_quota_as_it_goes() -> None:
    """Carol (cap 2) has two waiting 2-GPU jobs: only the first is covered, so bob's job
    is covered too and both start."""
    nlp = [
        running(30 + i, (i,), user="eve", group="nlp", started_at=NOW - 3600.0) for i in range(8)
    ]
    carol = [vision_job(1 + i, gpus=2, submit_time=NOW - 120.0 + i) for i in range(2)]
    carol = [replace(job, user="carol") for job in carol]
    bob = pending(
        3, 2, user="bob", group="vision", submit_time=NOW - 60.0, pending_since=NOW - 60.0
    )
    snap = snapshot(
        [*nlp, *carol, bob], EIGHT, now=NOW, groups=groups(vision=4),
        users=[Account("carol", quota=Quota(max_gpus=2))], gpulab_defaults=True,
    )  # fmt: skip
    assert guarantee_cover(snap, snap.jobs) == {1, 3}
    assert set(started(decide(snap))) == {1, 3}
