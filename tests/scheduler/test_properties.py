"""Property tests: on random snapshots every policy returns safe, deterministic decisions.

`decide` runs `check_decisions` on every result, so "it does not raise" already means: no
device twice, gangs all or nothing, accepted types, schedulable nodes and devices (nothing
on a cordoned GPU), quotas (this round's victims counted), min runtime, no starting job
preempted, required consolidation on one node, a reason for every pending job.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.accounting import queue_level_for
from scheduler.core.types import (
    Account,
    Consolidation,
    Device,
    Job,
    JobPhase,
    Node,
    PlacementKind,
    Quota,
    ReasonCode,
    SchedulerSettings,
    Snapshot,
)
from scheduler.policies import POLICIES, decide
from scheduler.policies.fifo import FIFO_IGNORED_SETTINGS
from scheduler.policies.guarantees import RECLAIM_PHRASE
from scheduler.policies.placement import (
    PLACERS,
    candidate_types,
    choose_pools,
    device_type_order,
)

TYPES = ("a100", "v100", "rtx3090")
USERS = ("alice", "bob", "carol")
GROUPS = ("vision", "nlp", None)
# The reference placers, plus AlloX (the default) when its module has registered it.
PLACEMENTS = tuple(kind for kind in PlacementKind if kind in PLACERS)


@st.composite
def snapshots(draw: st.DrawFn, policy: str, placement: PlacementKind) -> Snapshot:
    """A small random cluster: 1-4 nodes, running jobs on disjoint devices, pending jobs."""
    node_count = draw(st.integers(1, 4))
    devices: list[Device] = []
    nodes: list[Node] = []
    for index in range(node_count):
        name = f"n{index}"
        nodes.append(Node(name, schedulable=draw(st.booleans()) or index == 0))
        device_type = draw(st.sampled_from(TYPES))
        for _ in range(draw(st.sampled_from([1, 2, 4, 8]))):
            speed = draw(st.sampled_from([0.5, 1.0, 2.0]))
            # Now and then a GPU an admin cordoned: no policy may place anything on it.
            in_service = draw(st.sampled_from([True, True, True, False]))
            devices.append(Device(len(devices), name, device_type, speed, in_service))
    ids = [d.id for d in devices]
    busy = frozenset(draw(st.lists(st.sampled_from(ids), max_size=2, unique=True)))
    takeable = [i for i in ids if i not in busy]
    now = 10_000.0
    thresholds = draw(st.sampled_from([(3600.0,), (3250.0, 7200.0), ()]))
    jobs: list[Job] = []
    job_count = draw(st.integers(0, 10))
    for job_id in range(job_count):
        service = draw(st.sampled_from([0.0, 100.0, 3600.0, 8000.0]))
        common = {
            "user": draw(st.sampled_from(USERS)),
            "group": draw(st.sampled_from(GROUPS)),
            "submit_time": draw(st.sampled_from([0.0, 1.0, 2.0])),
            "accepted_types": draw(st.sampled_from([(), ("a100",), ("v100", "a100"), ("h100",)])),
            "consolidation": draw(st.sampled_from(list(Consolidation))),
            "attained_service": service,
            "service_since_promotion": service,
            "executed_since_promotion": draw(st.sampled_from([0.0, 50.0])),
            "waiting_since_promotion": draw(st.sampled_from([0.0, 500.0])),
            "queue_level": queue_level_for(service, thresholds),
            "queue_entered_at": draw(st.sampled_from([0.0, 5.0])),
            "preemptible": draw(st.sampled_from([True, True, False])),  # sessions are not
            "total_work": draw(st.sampled_from([None, 500.0, 50_000.0])),
            # Measured speeds per type (AlloX and the efficiency gate read them).
            "throughputs": draw(
                st.sampled_from([(), (("a100", 2.0), ("v100", 0.4)), (("v100", 1.5),)])
            ),
        }
        if takeable and draw(st.booleans()):
            gpus = draw(st.integers(1, min(4, len(takeable))))
            held, takeable = takeable[:gpus], takeable[gpus:]
            jobs.append(
                Job(
                    id=job_id,
                    num_gpus=gpus,
                    phase=JobPhase.RUNNING,
                    devices=tuple(held),
                    started_at=draw(st.sampled_from([None, 0.0, now - 10.0])),
                    # Still STARTING in the live loop: no policy may preempt or move it.
                    starting=draw(st.sampled_from([False, False, True])),
                    **common,
                )
            )
        else:
            gpus = draw(st.sampled_from([1, 2, 4, 8]))
            # None, just preempted, past the patience clock, past the starvation clock.
            since = draw(st.sampled_from([None, now - 5.0, now - 700.0, now - 4000.0]))
            jobs.append(
                Job(
                    id=job_id,
                    num_gpus=gpus,
                    phase=JobPhase.PENDING,
                    pending_since=since,
                    **common,
                )
            )
    quota = st.builds(
        Quota,
        max_gpus=st.sampled_from([None, 0, 2, 4]),
        max_running_jobs=st.sampled_from([None, 1, 2]),
        max_gpus_by_type=st.sampled_from([(), (("a100", 2),)]),
    )
    users = tuple(
        Account(
            name,
            weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
            usage=draw(st.sampled_from([0.0, 1e4])),
            quota=draw(quota),
        )
        for name in USERS
    )
    groups = tuple(
        Account(
            name,
            weight=draw(st.sampled_from([1.0, 3.0])),
            quota=draw(quota),
            guaranteed_gpus=draw(st.sampled_from([0, 0, 1, 2, 4])),
        )
        for name in GROUPS
        if name is not None
    )
    return Snapshot(
        now=now,
        jobs=tuple(jobs),
        devices=tuple(devices),
        nodes=tuple(nodes),
        users=users,
        groups=groups,
        settings=SchedulerSettings(
            policy=policy,
            placement=placement,
            queue_thresholds=thresholds,
            fairness=draw(st.sampled_from([0.0, 0.5, 1.0])),
            promote_knob=draw(st.sampled_from([None, 8.0])),
            min_runtime=300.0,
            # Tiresias' rules (0, 1, 0, 0) and gpulab's guards, in any combination.
            preempt_patience=draw(st.sampled_from([0.0, 600.0])),
            preempt_margin=draw(st.sampled_from([1, 2, 3])),
            max_victims=draw(st.sampled_from([0, 1])),
            starvation_seconds=draw(st.sampled_from([0.0, 3600.0])),
            allox_efficiency_gate=draw(st.sampled_from([0.0, 0.9, 1.0])),
        ),
        busy_device_ids=busy,
        finished_job_sizes=tuple(draw(st.lists(st.sampled_from([100.0, 5000.0]), max_size=60))),
    )


def reshuffled(snap: Snapshot, seed: int) -> Snapshot:
    """The same snapshot with jobs, devices, nodes and accounts listed in another order."""
    rng = random.Random(seed)

    def shuffle(items: tuple) -> tuple:  # type: ignore[type-arg]
        items = list(items)
        rng.shuffle(items)
        return tuple(items)

    return replace(
        snap,
        jobs=shuffle(snap.jobs),
        devices=shuffle(snap.devices),
        nodes=shuffle(snap.nodes),
        users=shuffle(snap.users),
        groups=shuffle(snap.groups),
    )


PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("policy", sorted(POLICIES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_every_policy_returns_safe_decisions_that_do_not_depend_on_input_order(
    policy: str, placement: PlacementKind, data: st.DataObject
) -> None:
    snap = data.draw(snapshots(policy, placement))
    decisions = decide(snap)  # raises InvariantViolation on anything unsafe
    assert decide(reshuffled(snap, seed=1)) == decisions
    assert decide(snap) == decisions


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_fifo_policies_never_preempt(policy: str, data: st.DataObject) -> None:
    snap = data.draw(snapshots(policy, PlacementKind.BEST_FIT))
    assert decide(snap).preemptions == ()


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_fifo_decisions_do_not_depend_on_the_settings_it_is_said_to_ignore(
    policy: str, placement: PlacementKind, data: st.DataObject
) -> None:
    snap = data.draw(snapshots(policy, placement))
    other_values = {
        "queue_thresholds": (60.0,),
        "promote_knob": 1.0,
        "fairness": 1.0 - snap.settings.fairness,
        "min_runtime": 0.0,
        "preempt_patience": 0.0,
        "preempt_margin": 1,
        "max_victims": 0,
        "starvation_seconds": 1.0,
    }
    assert set(other_values) == FIFO_IGNORED_SETTINGS
    changed = replace(snap, settings=replace(snap.settings, **other_values))
    assert decide(changed) == decide(snap)


@pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])
@pytest.mark.parametrize("policy", ["las", "gittins"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_tiresias_only_preempts_for_a_job_in_a_higher_priority_queue(
    policy: str, placement: PlacementKind, data: st.DataObject
) -> None:
    """Every preemption names a job of a higher queue, and that job starts on the victim's
    devices: not the pass, nor AlloX's placer and window step (which once gave a victim's
    device to a job behind it and held the claimant), nor the efficiency gate's eviction.
    (With AlloX a move names nobody: the job's own restart on a faster type.) What the
    claimant leaves of a wide victim may go to any job that fits, as Tiresias backfills.
    A job inside its group's guarantee may preempt any queue (test_guarantees.py), but
    it too starts on its victim's devices."""
    snap = data.draw(snapshots(policy, placement))
    decisions = decide(snap)
    levels = {job.id: job.queue_level for job in snap.jobs}
    for change in decisions.queue_changes:
        levels[change.job_id] = change.level
    starts = {start.job_id: set(start.device_ids) for start in decisions.starts}
    for preempt in decisions.preemptions:
        if preempt.by_job_id is None:
            assert placement is PlacementKind.ALLOX and "moving to" in preempt.reason
            continue
        if RECLAIM_PHRASE not in preempt.reason:
            assert levels[preempt.by_job_id] < levels[preempt.job_id]
        victim_devices = set(snap.job_by_id[preempt.job_id].devices)
        assert starts.get(preempt.by_job_id, set()) & victim_devices, preempt


@pytest.mark.parametrize("policy", sorted(POLICIES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_every_preemption_frees_devices_that_a_starting_job_uses(
    policy: str, data: st.DataObject
) -> None:
    snap = data.draw(snapshots(policy, PlacementKind.BEST_FIT))
    decisions = decide(snap)
    used = {d for start in decisions.starts for d in start.device_ids}
    for preempt in decisions.preemptions:
        assert used & set(snap.job_by_id[preempt.job_id].devices)


@pytest.mark.parametrize("policy", ["las", "gittins"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_with_allox_a_preemption_is_a_move_or_hands_a_device_to_the_job_it_names(
    policy: str, data: st.DataObject
) -> None:
    """AlloX adds preemptions the pass does not make: moves (`by_job_id` None, while
    nobody waits) and evictions under the efficiency gate. Either kind must be for something:
    an eviction's taker starts on the victim's device, and a move happens only when no job
    is held for capacity."""
    snap = data.draw(snapshots(policy, PlacementKind.ALLOX))
    decisions = decide(snap)
    starts = {start.job_id: set(start.device_ids) for start in decisions.starts}
    used = set().union(*starts.values()) if starts else set()
    for preempt in decisions.preemptions:
        victim_devices = set(snap.job_by_id[preempt.job_id].devices)
        if preempt.by_job_id is None:
            assert "moving to" in preempt.reason
            continue
        assert used & victim_devices
        if "efficiency gate" in preempt.reason:
            assert preempt.by_job_id in starts
            assert starts[preempt.by_job_id] <= victim_devices


@pytest.mark.parametrize("policy", ["las", "gittins"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_devices_are_only_reserved_behind_a_starving_job_held_for_capacity(
    policy: str, data: st.DataObject
) -> None:
    """The reservation is the one deliberate exception to work conservation (below): a job
    held `Reserved` sits behind, and in a lower queue than, a starving job that is itself
    held for capacity."""
    snap = data.draw(snapshots(policy, PlacementKind.BEST_FIT))
    decisions = decide(snap)
    position = {job_id: index for index, job_id in enumerate(decisions.order)}
    holds = {hold.job_id: hold for hold in decisions.holds}
    limit = snap.settings.starvation_seconds
    for hold in decisions.holds:
        if hold.reason.code is not ReasonCode.RESERVED:
            continue
        blocker = int(hold.reason.detail.split("job ", 1)[1].split(",", 1)[0])
        assert limit > 0
        assert snap.job_by_id[blocker].num_gpus > 1  # only wide jobs can starve
        assert position[blocker] < position[hold.job_id]
        assert holds[blocker].reason.code in (ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES)


@pytest.mark.parametrize("policy", ["fifo-backfill", "las", "gittins", "srtf", "srsf"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_a_job_held_for_resources_does_not_fit_in_what_the_round_leaves_free(
    policy: str, data: st.DataObject
) -> None:
    """Backfill is work-conserving: nothing held for capacity fits in the leftovers.

    Holds quotas out (a quota can narrow a job's types), and strict FIFO and the starvation
    guard's reservation (`Reserved` holds: they block on purpose). This is the check on the
    pass's memoized fast path: a shortcut that held a job which fits would show up here.
    """
    snap = data.draw(snapshots(policy, PlacementKind.BEST_FIT))
    snap = replace(
        snap,
        users=tuple(replace(account, quota=Quota()) for account in snap.users),
        groups=tuple(replace(account, quota=Quota()) for account in snap.groups),
    )
    decisions = decide(snap)
    preempted_ids = {p.job_id for p in decisions.preemptions}
    taken = {d for start in decisions.starts for d in start.device_ids}
    taken |= {
        d
        for job in snap.jobs
        if job.is_running and job.id not in preempted_ids
        for d in job.devices
    }
    schedulable = {node.name for node in snap.nodes if node.schedulable}
    leftover: dict[str, dict[str, int]] = {}
    for device in snap.devices:
        if (
            device.schedulable  # not cordoned
            and device.node in schedulable
            and device.id not in taken | snap.busy_device_ids
        ):
            by_node = leftover.setdefault(device.device_type, {})
            by_node[device.node] = by_node.get(device.node, 0) + 1
    type_order = device_type_order(snap.devices)
    for hold in decisions.holds:
        if hold.reason.code in (ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES):
            job = snap.job_by_id[hold.job_id]
            types = candidate_types(job, type_order)
            assert choose_pools(job.num_gpus, types, job.consolidation, leftover) is None, hold
