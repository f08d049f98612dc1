"""Accounting: how service, waiting time and usage advance (shared by sim and live loop)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.core.accounting import (
    advance_pending,
    advance_running,
    apply_queue_change,
    decay_usage,
    decayed_service,
    eligible_since,
    mark_preempted,
    mark_started,
    queue_level_for,
    speed_sum,
)
from scheduler.core.types import JobPhase, QueueChange
from tests.scheduler.builders import devices, pending, running

DAY = 86_400.0


@pytest.mark.parametrize(
    ("speeds", "dt", "service", "executed"),
    [
        (4.0, 10.0, 40.0, 10.0),  # 4 reference GPUs for 10 s = 40 GPU-s
        (2.0 * 2, 10.0, 40.0, 10.0),  # 2 GPUs of speed 2.0 count like 4 reference GPUs
        (0.8, 100.0, 80.0, 100.0),
        (4.0, 0.0, 0.0, 0.0),
    ],
)
def test_running_adds_speed_weighted_gpu_seconds_and_wall_seconds(
    speeds: float, dt: float, service: float, executed: float
) -> None:
    job = running(
        1,
        [0],
        attained_service=100.0,
        service_since_promotion=10.0,
        executed_since_promotion=5.0,
        waiting_since_promotion=7.0,
    )
    after = advance_running(job, dt, speeds)
    assert after.attained_service == 100.0 + service
    assert after.service_since_promotion == 10.0 + service
    assert after.executed_since_promotion == 5.0 + executed
    assert after.waiting_since_promotion == 7.0  # running does not wait
    assert job.attained_service == 100.0  # frozen input untouched


@pytest.mark.parametrize(
    ("executed", "waited_after"),
    [
        (30.0, 15.0),  # has run since its last promotion: the starvation clock runs
        (0.0, 3.0),  # never ran (or just promoted): waiting does not count yet
    ],
)
def test_pending_adds_waiting_time_only_after_the_job_has_run(
    executed: float, waited_after: float
) -> None:
    job = pending(
        1, 2, attained_service=50.0, executed_since_promotion=executed, waiting_since_promotion=3.0
    )
    after = advance_pending(job, 12.0)
    assert after.waiting_since_promotion == waited_after
    assert after.attained_service == 50.0
    assert after.executed_since_promotion == executed


@pytest.mark.parametrize(
    "advance", [advance_pending, lambda job, dt: advance_running(job, dt, 1.0)]
)
def test_time_never_runs_backwards(advance) -> None:
    with pytest.raises(ValueError, match="dt"):
        advance(pending(1, 1), -1.0)


@pytest.mark.parametrize(
    ("usage", "dt", "half_life", "expected"),
    [
        (100.0, 7 * DAY, 7 * DAY, 50.0),
        (100.0, 14 * DAY, 7 * DAY, 25.0),
        (100.0, 0.0, 7 * DAY, 100.0),
        (100.0, 5 * DAY, 0.0, 100.0),  # no decay configured
        (100.0, 5 * DAY, math.inf, 100.0),
    ],
)
def test_usage_decays_by_half_every_half_life(
    usage: float, dt: float, half_life: float, expected: float
) -> None:
    assert decay_usage(usage, dt, half_life) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("service", "thresholds", "level"),
    [
        (0.0, (3600.0,), 0),
        (3599.9, (3600.0,), 0),
        (3600.0, (3600.0,), 1),
        (7200.0, (3250.0, 7200.0), 2),
        (5000.0, (3250.0, 7200.0), 1),
        (1e9, (), 0),
    ],
)
def test_queue_level_counts_the_thresholds_crossed(
    service: float, thresholds: tuple[float, ...], level: int
) -> None:
    assert queue_level_for(service, thresholds) == level


@pytest.mark.parametrize("promoted", [True, False])
def test_applying_a_queue_change_moves_the_job_to_the_tail_and_resets_on_promotion(
    promoted: bool,
) -> None:
    job = pending(
        1,
        1,
        service_since_promotion=5000.0,
        executed_since_promotion=100.0,
        waiting_since_promotion=900.0,
        queue_level=1,
        attained_service=5000.0,
    )
    after = apply_queue_change(job, QueueChange(1, 0 if promoted else 1, promoted), now=42.0)
    assert after.queue_entered_at == 42.0
    assert after.attained_service == 5000.0  # whole-life service is never reset
    if promoted:
        assert (after.queue_level, after.service_since_promotion) == (0, 0.0)
        assert (after.executed_since_promotion, after.waiting_since_promotion) == (0.0, 0.0)
    else:
        assert after.service_since_promotion == 5000.0


def test_speed_sum_adds_the_speeds_of_the_devices_a_job_holds() -> None:
    devs = devices({"n1": ("a100", 2), "n2": ("v100", 2)}, speed={"a100": 2.0, "v100": 1.0})
    job = running(1, [0, 2, 99])  # 99 vanished: counted at the reference speed
    assert speed_sum(job, {d.id: d for d in devs}) == 2.0 + 1.0 + 1.0


def test_start_and_preemption_set_phase_devices_and_run_clock() -> None:
    job = mark_started(pending(1, 2, pending_since=10.0), (3, 4), now=50.0)
    assert (job.phase, job.devices, job.started_at) == (JobPhase.RUNNING, (3, 4), 50.0)
    assert job.pending_since is None  # not pending while it runs
    back = mark_preempted(job, 99.0)
    assert (back.phase, back.devices, back.started_at) == (JobPhase.PENDING, (), None)
    assert back.pending_since == 99.0  # a new pending spell: patience and starvation restart


@pytest.mark.parametrize(
    ("rate", "seconds", "half_life", "expected"),
    [
        # 1 GPU for one half-life: H/ln 2 × (1 − 1/2) = 604,800 / 0.6931472 / 2 = 436,270.98
        (1.0, 7 * DAY, 7 * DAY, 436_270.98),
        # 1 GPU for 14 days at 7 days: H/ln 2 × (1 − 1/4) = 654,406.47, not 1,209,600
        (1.0, 14 * DAY, 7 * DAY, 654_406.47),
        # 3 speed units (an a100 at 2.0 + a v100) for 90 min at 12 h: 15,518.03, not 16,200
        (3.0, 5400.0, 12 * 3600.0, 15_518.03),
        (4.0, 10.0, 7 * DAY, 39.99977),  # 10 s against a week: barely decayed
        (2.0, 0.0, 7 * DAY, 0.0),
        (2.0, 5 * DAY, 0.0, 2.0 * 5 * DAY),  # no decay configured
        (2.0, 5 * DAY, math.inf, 2.0 * 5 * DAY),
    ],
)
def test_a_runs_usage_decays_each_gpu_second_from_when_it_was_used(
    rate: float, seconds: float, half_life: float, expected: float
) -> None:
    assert decayed_service(rate, seconds, half_life) == pytest.approx(expected, rel=1e-6)


def test_a_run_split_in_two_counts_the_same_as_one_run() -> None:
    """Charged at a transition and decayed on, a run's first part plus the rest equals the
    whole run charged at once: no usage is lost or gained at a preemption."""
    half_life = 7 * DAY
    first = decay_usage(decayed_service(2.0, 3 * DAY, half_life), 5 * DAY, half_life)
    whole = decayed_service(2.0, 8 * DAY, half_life)
    assert first + decayed_service(2.0, 5 * DAY, half_life) == pytest.approx(whole)


def test_a_negative_run_length_is_refused() -> None:
    with pytest.raises(ValueError):
        decayed_service(1.0, -1.0, 7 * DAY)


def test_a_pending_spell_starts_when_a_retrys_backoff_ends() -> None:
    failed = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    backoff_end = failed + timedelta(hours=1)
    assert eligible_since(failed, backoff_end) == backoff_end
    assert eligible_since(failed, None) == failed  # never failed: the spell as stored
    # A later spell (a promotion, a requeue after the retry ran) is not moved back.
    assert eligible_since(backoff_end, failed) == backoff_end
    assert eligible_since(None, backoff_end) is None
    assert eligible_since(10.0, 70.0) == 70.0  # epoch seconds alike
