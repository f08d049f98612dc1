"""The demo's in-process loop does what Celery beat's tasks do in production."""

from __future__ import annotations

import pytest

from cluster.choices import NodeState
from cluster.models import Node
from scheduler.choices import RoundTrigger
from scheduler.embedded import iterate
from scheduler.models import SchedulingRound
from tests.factories import DeviceFactory, NodeFactory
from tests.scheduler.livefixtures import configure

LATER = 1e12  # neither the round nor the aggregates are due


@pytest.mark.django_db
def test_a_drained_node_whose_jobs_have_left_becomes_drained() -> None:
    node = NodeFactory(state=NodeState.DRAINING, state_reason="Drained by root: fans")
    DeviceFactory(node=node, index=0)

    iterate(event=False, now=0.0, last_round=LATER, next_aggregates=LATER)

    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINED


@pytest.mark.django_db
def test_a_round_runs_when_asked_and_is_remembered_as_the_last_one() -> None:
    rounds = SchedulingRound.objects.count()

    last_round, next_aggregates = iterate(
        event=True, now=100.0, last_round=LATER, next_aggregates=LATER
    )

    assert SchedulingRound.objects.count() == rounds + 1
    assert last_round == 100.0
    assert next_aggregates == LATER


@pytest.mark.django_db
def test_a_timer_round_comes_one_interval_after_the_last_round() -> None:
    configure(round_interval_seconds=10.0)

    last_round, _ = iterate(event=False, now=105.0, last_round=100.0, next_aggregates=LATER)
    assert not SchedulingRound.objects.exists()  # 5 s after the last round: not yet
    assert last_round == 100.0

    last_round, _ = iterate(event=False, now=110.0, last_round=100.0, next_aggregates=LATER)
    assert list(SchedulingRound.objects.values_list("trigger", flat=True)) == [RoundTrigger.TIMER]
    assert last_round == 110.0


@pytest.mark.django_db
def test_a_shorter_round_interval_takes_effect_at_once_not_after_the_old_one() -> None:
    configure(round_interval_seconds=3600.0)
    last_round, _ = iterate(event=True, now=0.0, last_round=float("-inf"), next_aggregates=LATER)
    assert SchedulingRound.objects.count() == 1

    configure(round_interval_seconds=10.0)  # an admin: every 10 s from now on
    for now in (20.0, 40.0, 60.0):
        last_round, _ = iterate(event=False, now=now, last_round=last_round, next_aggregates=LATER)

    # The old interval (an hour) would have allowed no timer round before 3600 s.
    assert list(SchedulingRound.objects.order_by("id").values_list("trigger", flat=True)) == [
        RoundTrigger.EVENT,
        RoundTrigger.TIMER,
        RoundTrigger.TIMER,
        RoundTrigger.TIMER,
    ]
    assert last_round == 60.0


@pytest.mark.django_db
def test_a_failing_round_is_retried_after_an_interval_not_every_tick(monkeypatch) -> None:
    # The round is recorded as failed; the loop used to run it again on every 2 s tick,
    # writing a traceback row each time and never reaching the aggregates.
    from scheduler import services as round_services

    configure(round_interval_seconds=10.0)
    monkeypatch.setattr(round_services, "decide", lambda snapshot: 1 / 0)
    last_round = 100.0
    for now in (110.0, 112.0, 114.0, 116.0):  # the loop ticks every 2 s
        last_round, _ = iterate(event=False, now=now, last_round=last_round, next_aggregates=LATER)
    assert last_round == 110.0
    assert SchedulingRound.objects.filter(outcome="failed").count() == 1


@pytest.mark.django_db
def test_the_aggregates_refresh_the_start_forecasts_and_a_failing_one_waits_its_turn(
    monkeypatch,
) -> None:
    from scheduler import forecast_services

    calls: list[str] = []

    def failing(*, now) -> None:  # type: ignore[no-untyped-def]
        calls.append("forecast")
        raise RuntimeError("forecast broke")

    monkeypatch.setattr(forecast_services, "start_forecasts_refresh", failing)
    next_aggregates = 0.0
    for now in (100.0, 102.0, 104.0):  # the loop ticks every 2 s
        _, next_aggregates = iterate(
            event=False, now=now, last_round=now, next_aggregates=next_aggregates
        )
    # Once with the aggregates, not again at every tick after it failed.
    assert calls == ["forecast"]
    assert next_aggregates == 130.0
