"""The policy registry and `decide`: dispatch by name, invariants on every result."""

from __future__ import annotations

import pytest

from scheduler.core.invariants import InvariantViolation
from scheduler.core.types import Decisions, PlacementKind, Snapshot, Start
from scheduler.policies import POLICIES, UnknownPolicy, decide
from scheduler.policies.placement import PLACERS, best_fit_place, get_placer
from tests.scheduler.builders import devices, pending, running, snapshot

ONE_NODE = devices({"n1": ("a100", 8)})


def test_every_policy_of_the_issue_is_registered() -> None:
    assert set(POLICIES) >= {"fifo", "fifo-backfill", "las", "gittins", "srtf", "srsf"}


def test_an_unknown_policy_name_is_an_error_that_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPolicy, match="las"):
        decide(snapshot([], ONE_NODE, policy="round-robin"))


def test_decide_checks_invariants_on_whatever_the_policy_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(snap: Snapshot) -> Decisions:
        return Decisions(starts=(Start(1, (0, 1)),))  # job 1 is already running

    monkeypatch.setitem(POLICIES, "broken", broken)
    with pytest.raises(InvariantViolation, match="already running"):
        decide(snapshot([running(1, [0, 1])], ONE_NODE, policy="broken"))


def test_the_allox_placer_registers_itself_when_the_registry_is_imported() -> None:
    assert PlacementKind.ALLOX in PLACERS
    decisions = decide(snapshot([pending(1, 2)], ONE_NODE, placement=PlacementKind.ALLOX))
    assert [start.job_id for start in decisions.starts] == [1]


def test_an_unregistered_placement_falls_back_to_best_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(PLACERS, PlacementKind.ALLOX)
    assert get_placer(PlacementKind.ALLOX) is best_fit_place
    decisions = decide(snapshot([pending(1, 2)], ONE_NODE, placement=PlacementKind.ALLOX))
    assert [start.job_id for start in decisions.starts] == [1]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_decide_is_a_pure_function_of_the_snapshot(policy: str) -> None:
    jobs = [running(1, [0, 1, 2, 3]), pending(2, 8, total_work=10.0), pending(3, 2)]
    snap = snapshot(jobs, ONE_NODE, policy=policy)
    assert decide(snap) == decide(snap)
