"""The demo loop's periodic sweeps are guarded one by one, as beat's tasks are: one that
keeps raising stops neither the rounds, nor the other sweeps, nor the loop's clocks."""

from __future__ import annotations

import importlib

import pytest

from cluster.choices import NodeState
from cluster.models import Node
from scheduler.choices import RoundTrigger
from scheduler.embedded import iterate
from scheduler.models import SchedulingRound
from tests.factories import DeviceFactory, NodeFactory
from tests.scheduler.livefixtures import configure

LATER = 1e12  # the aggregates are not due

BEFORE_THE_ROUND = [
    ("agents.simulated", "simulated_tick"),
    ("agents.simulated", "simulated_heartbeats"),
    ("cluster.services", "node_drain_settle"),
]
AFTER_THE_ROUND = [
    ("agents.heartbeats", "metrics_rollup"),
    ("dashboard.services", "aggregates_update"),
    ("dashboard.warm", "figure_caches_warm"),
]


def break_sweep(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> list[str]:
    """Make `module.name` raise on every call; returns the list of its calls."""
    calls: list[str] = []

    def broken(**kwargs: object) -> None:
        calls.append(name)
        raise RuntimeError(f"{name} broke")

    monkeypatch.setattr(importlib.import_module(module), name, broken)
    return calls


def loop_pass(*, event: bool, now: float, clocks: tuple[float, float]) -> tuple[float, float]:
    """One pass as `_run_forever` makes it: an iteration that raises keeps the old clocks."""
    last_round, next_aggregates = clocks
    try:
        return iterate(event=event, now=now, last_round=last_round, next_aggregates=next_aggregates)
    except Exception:
        return clocks


@pytest.mark.django_db
@pytest.mark.parametrize(("module", "name"), BEFORE_THE_ROUND)
def test_a_sweep_before_the_round_that_keeps_failing_stops_no_round(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str
) -> None:
    calls = break_sweep(monkeypatch, module, name)

    clocks = loop_pass(event=True, now=100.0, clocks=(LATER, LATER))
    clocks = loop_pass(event=True, now=102.0, clocks=clocks)

    assert calls == [name, name]
    assert SchedulingRound.objects.filter(trigger=RoundTrigger.EVENT).count() == 2
    assert clocks == (102.0, LATER)


@pytest.mark.django_db
def test_failing_heartbeats_stop_neither_the_drain_settling_nor_the_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    break_sweep(monkeypatch, "agents.simulated", "simulated_heartbeats")
    node = NodeFactory(state=NodeState.DRAINING, state_reason="Drained by root: fans")
    DeviceFactory(node=node, index=0)

    iterate(event=True, now=100.0, last_round=LATER, next_aggregates=LATER)

    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED
    assert SchedulingRound.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(("module", "name"), AFTER_THE_ROUND)
def test_a_failing_aggregate_sweep_leaves_one_timer_round_per_interval_not_one_per_tick(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str
) -> None:
    configure(round_interval_seconds=10.0)
    calls = break_sweep(monkeypatch, module, name)
    forecasts = break_sweep(monkeypatch, "scheduler.forecast_services", "start_forecasts_refresh")

    clocks = (90.0, 0.0)  # a timer round and the aggregates are both due at 100
    for now in (100.0, 102.0, 104.0, 106.0):  # the loop ticks every 2 s
        clocks = loop_pass(event=False, now=now, clocks=clocks)

    assert list(SchedulingRound.objects.values_list("trigger", flat=True)) == [RoundTrigger.TIMER]
    assert clocks == (100.0, 130.0)
    # Once with the aggregates, and the sweeps after it still ran.
    assert (calls, forecasts) == ([name], ["start_forecasts_refresh"])
