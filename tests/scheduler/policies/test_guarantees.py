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
    assert "guarantee of 4 GPUs" in reason and "beyond what group nlp is guaranteed" in reason


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
