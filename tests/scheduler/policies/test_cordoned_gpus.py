"""A cordoned GPU (`Device.schedulable=False`) is out of service, not missing.

Nothing is placed on it; but a job that would fit with it back in service is held
NodeDrained (an admin can act), never TypeUnavailable, which tells the user to change
the request.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.invariants import InvariantViolation, check_decisions
from scheduler.core.types import Decisions, Node, PlacementKind, Start
from scheduler.policies import decide
from tests.scheduler.builders import REQUIRED, devices, held, pending, snapshot, started

CORDON = "GPUs it needs are out of service (cordoned by an admin)"
NODES = (
    "the nodes that could hold it take no new jobs now (draining, drained, down or not answering)"
)


def cordoned(devs, *ids: int):  # type: ignore[no-untyped-def]
    return tuple(replace(d, schedulable=False) if d.id in ids else d for d in devs)


FOUR = devices({"n1": ("v100", 4)})
THREE_CORDONED = cordoned(FOUR, 0, 1, 2)


@pytest.mark.parametrize("placement", [PlacementKind.BEST_FIT, PlacementKind.ALLOX])
@pytest.mark.parametrize("policy", ["las", "gittins", "fifo", "fifo-backfill"])
def test_a_job_that_needs_cordoned_gpus_waits_for_them_not_for_a_new_request(
    policy: str, placement: PlacementKind
) -> None:
    jobs = [pending(1, 4), pending(2, 1, accepted_types=("v100",))]
    decisions = decide(snapshot(jobs, THREE_CORDONED, policy=policy, placement=placement))
    assert started(decisions) == {2: (3,)}  # the one GPU in service, never a cordoned one
    assert held(decisions) == {1: f"NodeDrained: needs 4 × GPU; {CORDON}"}


def test_every_gpu_of_its_type_cordoned_is_out_of_service_too() -> None:
    jobs = [pending(1, 1, accepted_types=("v100",))]
    decisions = decide(snapshot(jobs, cordoned(FOUR, 0, 1, 2, 3)))
    assert held(decisions) == {1: f"NodeDrained: needs 1 × v100; {CORDON}"}


def test_a_job_larger_than_the_cluster_is_still_type_unavailable() -> None:
    decisions = decide(snapshot([pending(1, 5)], THREE_CORDONED))
    assert held(decisions) == {1: "TypeUnavailable: the cluster has fewer than 5 schedulable v100"}


# n1: two v100s, one cordoned; n2 (drained): one v100.
@pytest.mark.parametrize(
    ("gpus", "consolidation", "reason"),
    [
        # The one in service on n1 + the drained n2's: the node is what it waits for.
        (2, None, f"NodeDrained: needs 2 × GPU; {NODES}"),
        # n1 with its cordoned GPU back holds it: the cordon is what it waits for.
        (2, REQUIRED, f"NodeDrained: needs 2 × GPU on one node; {CORDON}"),
        # Only both back hold it.
        (
            3,
            None,
            "NodeDrained: needs 3 × GPU; GPUs it needs are out of service (cordoned by an "
            "admin) or on nodes that take no new jobs now (draining, drained, down or not "
            "answering)",
        ),
        # No node could ever hold it.
        (3, REQUIRED, "TypeUnavailable: no schedulable node has 3 × v100"),
    ],
)
def test_the_reason_names_the_cordon_the_drained_node_or_both(
    gpus: int, consolidation: object, reason: str
) -> None:
    devs = cordoned(devices({"n1": ("v100", 2), "n2": ("v100", 1)}), 0)
    fields = {} if consolidation is None else {"consolidation": consolidation}
    snap = snapshot(
        [pending(1, gpus, **fields)], devs, nodes=[Node("n1"), Node("n2", schedulable=False)]
    )
    assert held(decide(snap)) == {1: reason}


def test_the_invariants_refuse_a_start_on_a_cordoned_gpu() -> None:
    snap = snapshot([pending(1, 1)], THREE_CORDONED)
    with pytest.raises(InvariantViolation, match="unschedulable device 0"):
        check_decisions(snap, Decisions(starts=(Start(1, (0,)),), order=(1,)))
    check_decisions(snap, Decisions(starts=(Start(1, (3,)),), order=(1,)))
