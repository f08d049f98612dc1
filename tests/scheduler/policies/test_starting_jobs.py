"""A job still STARTING (`Job.starting`) is nobody's victim and never moved.

The live job state machine lets only a RUNNING job be preempted: a preemption of a job
whose launch is slow (an image pull) was dropped at apply, and its claimant's start with
it, every round until the launch ended. Past its minimum runtime or not, a starting job
is protected like a non-preemptible one (`policies.base.is_protected`).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.invariants import InvariantViolation, check_decisions
from scheduler.core.types import (
    Decisions,
    Hold,
    PlacementKind,
    Preempt,
    Reason,
    ReasonCode,
    Start,
)
from scheduler.policies import decide
from scheduler.policies.base import is_protected
from tests.scheduler.builders import devices, held, pending, preempted, running, snapshot, started
from tests.scheduler.policies.test_allox_moves import allox, on_k80
from tests.scheduler.policies.test_efficiency_gate import SPEED, _evict, _resnet_on_a_k80

TWO_V100 = devices({"n1": ("v100", 2)})


def veteran(*, starting: bool):  # type: ignore[no-untyped-def]
    """Two hours on two GPUs (queue 1 under Tiresias' rules), allocated long past the
    minimum runtime."""
    return running(
        1,
        (0, 1),
        started_at=0.0,
        attained_service=14_400.0,
        service_since_promotion=14_400.0,
        executed_since_promotion=7_200.0,
        starting=starting,
    )


@pytest.mark.parametrize("policy", ["las", "gittins"])
@pytest.mark.parametrize("starting", [False, True])
def test_a_starting_job_past_its_minimum_runtime_is_not_preempted(
    policy: str, starting: bool
) -> None:
    snap = snapshot(
        [veteran(starting=starting), pending(2, 2, user="carol")], TWO_V100, policy=policy
    )
    decisions = decide(snap)  # the invariants run too
    if not starting:  # the control: Tiresias preempts the queue-1 job for a new one
        assert preempted(decisions) == {1: 2}
        assert started(decisions) == {2: (0, 1)}
        return
    assert preempted(decisions) == {}
    assert started(decisions) == {}
    assert held(decisions)[2].startswith("WaitingForResources")


def test_a_starting_job_is_protected_even_when_preemptible_and_old() -> None:
    snap = snapshot([], TWO_V100)
    assert not is_protected(veteran(starting=False), snap)
    assert is_protected(veteran(starting=True), snap)


@pytest.mark.parametrize("starting", [False, True])
def test_a_starting_job_is_not_moved_to_a_faster_free_device(starting: bool) -> None:
    decisions = decide(allox([on_k80(1, 0.1, starting=starting)]))
    assert preempted(decisions) == ({} if starting else {1: None})


@pytest.mark.parametrize("starting", [False, True])
def test_a_starting_job_is_not_evicted_by_the_efficiency_gate(starting: bool) -> None:
    devs = devices({"nv": ("v100", 1), "nk": ("k80", 1)}, SPEED)
    snap = snapshot(_resnet_on_a_k80(starting=starting), devs, placement=PlacementKind.ALLOX)
    classes = {8: 0, 9: 1, **dict.fromkeys(range(1, 5), 0)}
    decisions = _evict(snap, classes)
    assert preempted(decisions) == ({} if starting else {9: 1})


def test_the_invariants_refuse_preempting_a_starting_job() -> None:
    snap = snapshot([veteran(starting=True), pending(2, 2, user="carol")], TWO_V100)
    decisions = Decisions(
        starts=(Start(2, (0, 1)),), preemptions=(Preempt(1, "test", by_job_id=2),), order=(2, 1)
    )
    with pytest.raises(InvariantViolation, match="still starting"):
        check_decisions(snap, decisions)
    running_snap = replace(snap, jobs=(veteran(starting=False), snap.jobs[1]))
    check_decisions(running_snap, decisions)
    wait = Reason(ReasonCode.WAITING_FOR_RESOURCES, "test")
    check_decisions(snap, Decisions(holds=(Hold(2, wait, 1),), order=(2, 1)))
