"""The event loop on tiny traces whose JCTs are computed by hand."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.types import (
    Account,
    Consolidation,
    Decisions,
    PlacementKind,
    SchedulerSettings,
    Snapshot,
    Start,
)
from scheduler.sim.clusters import SimCluster, homogeneous_cluster
from scheduler.sim.engine import (
    MAX_TRACE_SPAN,
    ReplayError,
    SimConfig,
    SimulationError,
    simulate,
    unplaceable_jobs,
)
from scheduler.sim.metrics import summarize
from scheduler.sim.traces import TraceJob
from tests.scheduler.sim.helpers import jcts, job, reference_settings, run

# A 1-GPU job holds both GPUs' worth of nothing: B (2 GPUs) waits for A, C waits behind B.
HOL_TRACE = [job(0, 1, 0, 100), job(1, 2, 10, 50), job(2, 1, 20, 30)]


def test_fifo_on_two_gpus_blocks_the_head_of_the_line() -> None:
    result = run(HOL_TRACE, reference_settings("fifo"))
    # A 0→100; B waits for 2 GPUs, 100→150; C is behind B (strict FIFO), 150→180.
    assert jcts(result) == {0: 100, 1: 140, 2: 160}
    assert [r.queueing_delay for r in result.records] == [0, 90, 130]


def test_fifo_backfill_lets_the_small_job_skip_ahead() -> None:
    result = run(HOL_TRACE, reference_settings("fifo-backfill"))
    # C fits beside A at 20 (→50); B still starts when A ends at 100.
    assert jcts(result) == {0: 100, 1: 140, 2: 30}


@pytest.mark.parametrize(("restore", "expected_a"), [(0.0, 120.0), (30.0, 150.0)])
def test_a_resumed_job_pays_the_restore_cost(restore: float, expected_a: float) -> None:
    # SRTF on 1 GPU: B (20 s) preempts A (90 s left) at 10, ends at 30; A resumes at 30,
    # restores for `restore` seconds, then runs its last 90 s.
    trace = [job(0, 1, 0, 100), job(1, 1, 10, 20)]
    result = run(trace, reference_settings("srtf", restore_cost=restore), homogeneous_cluster(1, 1))
    assert jcts(result) == {0: expected_a, 1: 20}
    a = result.records[0]
    assert (a.preemptions, a.resumes) == (1, 1)
    assert a.queueing_delay == 20  # pending 10→30
    # Restore time holds the GPU and counts as service: 100 s of work + the restore.
    assert a.service == pytest.approx(100 + restore)


def test_las_demotes_at_the_threshold_and_the_new_job_preempts() -> None:
    # Threshold 100 GPU·s on 1 GPU. A runs from 0; B arrives at 50 into the same queue (no
    # preemption inside a queue). At 100 A crosses into queue 1 and B takes the GPU until
    # 200; A resumes and finishes its remaining 200 s at 400.
    trace = [job(0, 1, 0, 300), job(1, 1, 50, 100)]
    settings_ = reference_settings("las", queue_thresholds=(100.0,))
    result = run(trace, settings_, homogeneous_cluster(1, 1))
    assert jcts(result) == {0: 400, 1: 150}
    assert result.records[0].demotions == 1
    assert result.records[0].preemptions == 1


def test_timer_decisions_wait_for_the_next_tick() -> None:
    # Same trace with a 30 s tick: the crossing at 100 is noticed by the timer at 120.
    trace = [job(0, 1, 0, 300), job(1, 1, 50, 100)]
    settings_ = reference_settings("las", queue_thresholds=(100.0,))
    result = run(trace, settings_, homogeneous_cluster(1, 1), tick=30.0)
    assert jcts(result) == {0: 400, 1: 170}


def test_a_job_progresses_at_its_throughput_on_the_device_type() -> None:
    cluster = SimCluster(
        devices=homogeneous_cluster(1, 2, device_type="k80").devices,
        nodes=homogeneous_cluster(1, 2).nodes,
        throughputs={"resnet50": (("k80", 0.25),)},
    )
    trace = [job(0, 1, 0, 100, model="resnet50"), job(1, 1, 0, 100, model="other")]
    result = run(trace, reference_settings("fifo"), cluster)
    # resnet50 runs at 0.25 of reference on a K80: 100 s of work take 400 s; the model
    # without a row runs at the device speed (1.0 here).
    assert jcts(result) == {0: 400, 1: 100}
    assert result.records[0].ideal_runtime == 400


def test_a_gang_spanning_two_types_runs_at_its_slowest_type() -> None:
    fast = homogeneous_cluster(1, 1, device_type="v100").devices[0]
    slow = type(fast)(id=1, node=fast.node, device_type="k80", speed=0.5)
    cluster = SimCluster(devices=(fast, slow), nodes=homogeneous_cluster(1, 1).nodes)

    def take_everything(snapshot: Snapshot) -> Decisions:
        pending = [j for j in snapshot.jobs if not j.is_running]
        return Decisions(starts=tuple(Start(j.id, (0, 1)) for j in pending[:1]))

    result = simulate(
        [job(0, 2, 0, 100)],
        cluster,
        reference_settings("fifo"),
        decide=take_everything,
        config=SimConfig(tick=0, check_invariants=False),
    )
    assert jcts(result) == {0: 200}  # K80 at 0.5 paces the gang
    assert result.records[0].service == pytest.approx(300)  # (1.0 + 0.5) GPU-speed × 200 s


def test_a_job_larger_than_the_cluster_stops_the_replay_with_a_reason() -> None:
    result = run([job(0, 1, 0, 10), job(1, 4, 0, 10)], reference_settings("fifo-backfill"))
    assert jcts(result) == {0: 10, 1: None}
    assert result.unfinished == 1
    assert result.stop_reason.startswith("stuck")


def test_a_policy_that_double_books_a_device_is_caught() -> None:
    def greedy(snapshot: Snapshot) -> Decisions:
        pending = [j for j in snapshot.jobs if not j.is_running]
        return Decisions(starts=tuple(Start(j.id, (0,)) for j in pending))

    with pytest.raises(SimulationError, match="busy devices"):
        simulate(
            [job(0, 1, 0, 10), job(1, 1, 5, 10)],
            homogeneous_cluster(1, 2),
            reference_settings("fifo"),
            decide=greedy,
            config=SimConfig(tick=0, check_invariants=False),
        )


def test_the_busy_timeline_integrates_to_the_gpu_seconds_used() -> None:
    result = run(HOL_TRACE, reference_settings("fifo-backfill"))
    timeline = result.busy_timeline
    held = sum(b * (t1 - t0) for (t0, b), (t1, _) in pairwise(timeline))
    assert held == 100 * 1 + 50 * 2 + 30 * 1


traces = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 2, 4]),
        st.integers(min_value=0, max_value=2000),
        st.integers(min_value=1, max_value=3000),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=12, deadline=None)
@given(
    rows=traces,
    policy=st.sampled_from(["fifo", "fifo-backfill", "las", "gittins", "srtf", "srsf"]),
    restore=st.sampled_from([0.0, 30.0]),
    placement=st.sampled_from([PlacementKind.GPU_COUNT, PlacementKind.BEST_FIT]),
)
def test_every_job_finishes_and_its_time_adds_up(
    rows: list[tuple[int, int, int]], policy: str, restore: float, placement: PlacementKind
) -> None:
    trace = [TraceJob(i, g, float(s), float(d)) for i, (g, s, d) in enumerate(rows)]
    settings_ = reference_settings(
        policy,
        restore_cost=restore,
        placement=placement,
        queue_thresholds=(600.0,),
        promote_knob=2.0,
        min_runtime=60.0,
    )
    result = run(trace, settings_, homogeneous_cluster(2, 4), tick=10.0)
    assert result.unfinished == 0
    for record in result.records:
        # JCT = waiting + running, and running = work + one restore per resume.
        expected = record.queueing_delay + record.duration + record.resumes * restore
        assert record.jct is not None
        assert math.isclose(record.jct, expected, rel_tol=1e-9, abs_tol=1e-6)
        assert record.resumes == record.preemptions
    assert max(busy for _, busy in result.busy_timeline) <= 8


@settings(max_examples=40, deadline=None)
@given(
    dt=st.floats(min_value=0, max_value=1e6),
    speed=st.floats(min_value=0, max_value=64),
    running=st.booleans(),
    service=st.floats(min_value=0, max_value=1e7),
    executed=st.sampled_from([0.0, 11.0]),
)
def test_the_fast_advance_equals_core_accounting(
    dt: float, speed: float, running: bool, service: float, executed: float
) -> None:
    from dataclasses import replace

    from scheduler.core import accounting
    from scheduler.core.types import Job, JobPhase
    from scheduler.sim.engine import advance_job

    base = Job(
        id=7, user="u", group="g", num_gpus=4, submit_time=1.0,
        phase=JobPhase.RUNNING if running else JobPhase.PENDING,
        devices=(0, 1, 2, 3) if running else (), attained_service=service,
        service_since_promotion=service / 2, executed_since_promotion=executed,
        waiting_since_promotion=5.0, queue_level=1, queue_entered_at=3.0,
        started_at=2.0 if running else None, model="m", throughputs=(("a", 1.5),),
        # Every field off its default, so a field out of place in the positional
        # constructor shows.
        preemptible=False, reclaimable=True, total_work=99.0, pending_since=4.0,
        starting=running,
    )  # fmt: skip
    expected = (
        accounting.advance_running(base, dt, speed)
        if running
        else accounting.advance_pending(base, dt)
    )
    assert advance_job(base, dt, speed, 123.0) == replace(expected, total_work=123.0)
    assert advance_job(base, dt, speed, base.total_work) == replace(expected, total_work=99.0)


def test_the_fast_advance_is_on() -> None:
    # Off, replays run at about half speed without a word: a field added to Job must be
    # added to engine._JOB_FIELDS and to advance_job's constructors (in Job's order).
    from scheduler.sim import engine

    assert engine._FAST_PATH, "add Job's new field to engine._JOB_FIELDS and advance_job"


@settings(max_examples=30, deadline=None)
@given(
    rows=traces,
    policy=st.sampled_from(["fifo-backfill", "las", "gittins", "srsf"]),
    knob=st.sampled_from([None, 2.0]),
    guards=st.booleans(),
)
def test_skipping_idle_rounds_changes_nothing(
    rows: list[tuple[int, int, int]], policy: str, knob: float | None, guards: bool
) -> None:
    """Skipped rounds (nobody waits, no clock due) change no start, finish, preemption or
    promotion. Demotions are counted when a round sees them, so a job that crosses a
    threshold and finishes before any round needed to look may count one fewer: not
    compared."""
    trace = [TraceJob(i, g, float(s), float(d)) for i, (g, s, d) in enumerate(rows)]
    settings_ = reference_settings(
        policy,
        restore_cost=30.0,
        placement=PlacementKind.BEST_FIT,
        queue_thresholds=(600.0, 2000.0, 4000.0, 8000.0),
        promote_knob=knob,
        min_runtime=60.0,
        # gpulab's clocks (patience, starvation) wake the engine through Decisions.wake_at.
        **(
            {"preempt_patience": 120.0, "preempt_margin": 2, "max_victims": 1,
             "starvation_seconds": 900.0}
            if guards
            else {}
        ),
    )  # fmt: skip
    outcomes = []
    for skip in (True, False):
        result = simulate(
            trace,
            homogeneous_cluster(2, 4),
            settings_,
            config=SimConfig(tick=10.0, check_invariants=True, skip_idle_rounds=skip),
        )
        outcomes.append(
            [
                (r.id, r.first_start, r.finish_time, r.preemptions, r.promotions)
                for r in result.records
            ]
        )
    assert outcomes[0] == outcomes[1]


def _v100_and_k80() -> SimCluster:
    from scheduler.core.types import Device, Node

    return SimCluster(
        devices=(Device(0, "n0", "v100", 1.0), Device(1, "n1", "k80", 0.5)),
        nodes=(Node("n0"), Node("n1")),
        throughputs={"slow": (("v100", 1.0), ("k80", 0.1))},
    )


@pytest.mark.parametrize(("placement", "expected"), [("allox", 1939.1), ("best-fit", 10_000.0)])
def test_a_job_crawling_on_a_k80_moves_to_the_v100_when_it_frees(
    placement: str, expected: float
) -> None:
    # Job 0 takes the V100; job 1 (10x slower on a K80) gets the K80 at t = 1. At t = 1000
    # the V100 frees: with AlloX placement job 1 is moved (preempted at 1000, restarted at
    # the next 10 s tick, 30 s restore), having done 99.9 s of work: 1010 + 30 + 900.1.
    trace = [job(0, 1, 0, 1000, model="other"), job(1, 1, 1, 1000, model="slow")]
    settings_ = SchedulerSettings(placement=PlacementKind(placement), restore_cost=30.0)
    result = run(trace, settings_, _v100_and_k80(), tick=10.0)
    assert jcts(result)[0] == 1000
    assert jcts(result)[1] == pytest.approx(expected)
    assert result.records[1].preemptions == (1 if placement == "allox" else 0)


def test_the_replay_stops_once_the_watched_jobs_have_finished() -> None:
    trace = [job(0, 1, 0, 100), job(1, 1, 50, 100), job(2, 1, 60, 1000)]
    result = simulate(
        trace,
        homogeneous_cluster(1, 1),
        reference_settings("fifo"),
        config=SimConfig(tick=0, stop_when_finished=frozenset({0, 1})),
    )
    assert jcts(result) == {0: 100, 1: 150, 2: None}
    assert result.stop_reason == "every watched job finished"


@pytest.mark.parametrize(("patience", "short_jct"), [(600.0, 650.0), (0.0, 50.0)])
def test_the_engine_wakes_when_a_held_jobs_patience_runs_out(
    patience: float, short_jct: float
) -> None:
    # Queues at 100 x 2^i GPU-s. The long job L runs from 0 and is in queue 4
    # (>= 800 GPU-s) when S arrives at 1100, 4 queues above it. S may preempt L once it has
    # waited `patience`: at 1700, a moment no arrival, completion or threshold crossing
    # marks (L crosses at 1600 and 3200), so only Decisions.wake_at can wake the engine.
    trace = [job(0, 1, 0, 100_000), job(1, 1, 1100, 50)]
    settings_ = replace(
        SchedulerSettings(),
        placement=PlacementKind.BEST_FIT,
        queue_thresholds=tuple(100.0 * 2**i for i in range(17)),
        restore_cost=0.0,
        min_runtime=0.0,
        preempt_patience=patience,
    )
    result = run(trace, settings_, homogeneous_cluster(1, 1))
    assert jcts(result)[1] == short_jct
    assert result.records[0].preemptions == 1


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_alpha_starts_every_user_that_a_free_device_fits_at_once(alpha: float) -> None:
    # Two users, a V100 and a K80 (0.9). With α = 0.5 AlloX serves one user first and the
    # other on what is left, in the same round. It used to hold the second user with the
    # K80 free until the next round.
    from scheduler.core.types import Device, Node

    cluster = SimCluster(
        devices=(Device(0, "a", "v100", 1.0), Device(1, "b", "k80", 0.9)),
        nodes=(Node("a"), Node("b")),
    )
    trace = [
        TraceJob(1, 1, 0.0, 3600.0, user="bob"),
        TraceJob(3, 1, 0.0, 3600.0, user="alice"),
    ]
    settings_ = SchedulerSettings(allox_alpha=alpha, min_runtime=300.0)
    result = simulate(trace, cluster, settings_, config=SimConfig())
    first_starts = sorted(record.first_start for record in result.records)
    assert first_starts == [0.0, 0.0]


# Three 2-GPU jobs on 2 GPUs, one 50 GPU·s queue, knob 2: a resumed job earns 30 s × 2 GPUs
# = 60 GPU·s while it restores, crosses the threshold at 25 s, is demoted and preempted
# before it does any work, and the knob promotes the job it displaced; for ever.
SWAP_TRACE = [job(0, 2, 0, 400), job(1, 2, 0, 100), job(2, 2, 0, 3000)]


def _swap_settings(min_runtime: float) -> SchedulerSettings:
    return reference_settings(
        "las",
        restore_cost=30.0,
        queue_thresholds=(50.0,),
        promote_knob=2.0,
        min_runtime=min_runtime,
    )


@pytest.mark.parametrize("min_runtime", [0.0, 30.0])
def test_a_replay_whose_resumes_never_outlast_their_restore_stops_with_the_cause(
    min_runtime: float,
) -> None:
    # A minimum runtime equal to the restore cost still preempts at the restore's end.
    result = run(SWAP_TRACE, _swap_settings(min_runtime), homogeneous_cluster(1, 2))
    assert result.unfinished > 0
    assert result.stop_reason.startswith("stalled: replay stalled at")
    message = result.stop_reason
    assert "no job did any work or finished" in message
    assert "30 s (--restore-cost) x 2 GPUs = 60 GPU·s" in message
    assert "50 GPU·s queue threshold" in message
    assert "--min-runtime well above the restore cost" in message


def test_a_minimum_runtime_above_the_restore_cost_lets_the_swap_finish() -> None:
    result = run(SWAP_TRACE, _swap_settings(31.0), homogeneous_cluster(1, 2))
    assert result.unfinished == 0


def test_many_wasted_restores_without_promotion_are_no_stall() -> None:
    # Without the knob a job is demoted at most once per queue, so this replay wastes
    # over a thousand restores (150 jobs x 11 demotions) and still finishes: the guard
    # counts only a restore wasted again at a level where it was wasted before.
    queues = tuple(10.0 * level for level in range(1, 12))
    trace = [job(i, 1, 0, 100) for i in range(150)]
    settings_ = reference_settings("las", restore_cost=30.0, queue_thresholds=queues)
    result = run(trace, settings_, homogeneous_cluster(1, 1))
    assert result.unfinished == 0
    assert sum(record.preemptions for record in result.records) > 1000


def _shifted(trace: list[TraceJob], offset: float) -> list[TraceJob]:
    return [replace(j, submit_time=j.submit_time + offset) for j in trace]


# Submits 1024 s apart: exact at 1e18 too (a float there is a multiple of 128).
EPOCH_TRACE = [job(i, 1 + i % 2, 1024.0 * i, 5000 + 997 * i) for i in range(6)]


@pytest.mark.parametrize(
    ("offset", "tick", "origin"),
    [(1e18, 10.0, 1e18), (1e18, 0.0, 1e18), (1_000_003.0, 10.0, 1_000_000.0)],
)
def test_a_trace_that_starts_late_replays_like_the_same_trace_from_zero(
    offset: float, tick: float, origin: float
) -> None:
    # Nanosecond epochs (~1e18) left no float between now and now + tick: the clock
    # stopped. The replay now runs from the first submit rounded down to the tick grid,
    # so timer rounds land where they did (a trace 3 s off the grid stays 3 s off it).
    settings_ = replace(SchedulerSettings(), placement=PlacementKind.BEST_FIT)
    cluster = homogeneous_cluster(1, 2)
    base = run(_shifted(EPOCH_TRACE, offset - origin), settings_, cluster, tick=tick)
    late = run(_shifted(EPOCH_TRACE, offset), settings_, cluster, tick=tick)
    assert late.time_origin == origin
    assert jcts(late) == jcts(base)
    assert summarize(late) == summarize(base)


def test_a_trace_whose_submits_span_beyond_float_precision_is_refused() -> None:
    trace = [job(0, 1, 0, 10), job(1, 1, 4 * MAX_TRACE_SPAN, 10)]
    with pytest.raises(ReplayError, match="check the trace's time unit"):
        run(trace, reference_settings("fifo"), homogeneous_cluster(1, 1))


def test_a_clock_that_cannot_move_forward_stops_the_replay() -> None:
    # A runs 1e20 s; at its end B (1e6 s) starts with C waiting, so B's minimum runtime
    # wants a timer round 300 s later, which rounds back to 1e20 (floats are 16384 s apart
    # there): the loop would wake at 1e20 for ever.
    def one_at_a_time(snapshot: Snapshot) -> Decisions:
        if any(j.is_running for j in snapshot.jobs):
            return Decisions()
        waiting = min(j.id for j in snapshot.jobs)
        return Decisions(starts=(Start(waiting, (0,)),))

    with pytest.raises(ReplayError, match="the clock cannot move past now"):
        simulate(
            [job(0, 1, 0, 1e20), job(1, 1, 0, 1e6), job(2, 1, 0, 10)],
            homogeneous_cluster(1, 1),
            reference_settings("srtf", min_runtime=300.0),
            decide=one_at_a_time,
            config=SimConfig(tick=10.0, check_invariants=False),
        )


def test_a_replay_honours_the_groups_guarantees_it_is_given() -> None:
    """`SimConfig.groups`: lab's guarantee reclaims a GPU from hog's long job at once,
    instead of waiting for it to end (a guarantee the trace format cannot carry)."""
    trace = [
        TraceJob(id=0, num_gpus=1, submit_time=0.0, duration=36_000.0, user="h", group="hog"),
        TraceJob(id=1, num_gpus=1, submit_time=600.0, duration=600.0, user="l", group="lab"),
    ]
    cluster = homogeneous_cluster(1, 1)
    settings = SchedulerSettings(policy="las")
    waits = {}
    for guarantee in (0, 1):
        config = SimConfig(groups=(Account("lab", guaranteed_gpus=guarantee),))
        result = simulate(trace, cluster, settings, config=config)
        lab = next(record for record in result.records if record.id == 1)
        waits[guarantee] = lab.first_start - lab.submit_time
    assert waits[1] == 0.0
    # Without it, until hog's job is 3 queues below lab's (the margin): 4 h of service.
    assert waits[0] == 14_400.0 - 600.0


def test_unplaceable_jobs_bounds_a_required_job_by_its_largest_node() -> None:
    cluster = homogeneous_cluster(2, 4)  # two nodes of 4 GPUs
    required = Consolidation.REQUIRED

    def of(job_id: int, gpus: int, consolidation: Consolidation) -> TraceJob:
        return TraceJob(job_id, gpus, 0.0, 60.0, consolidation=consolidation)

    trace = [of(1, 4, required), of(2, 5, required), of(3, 8, Consolidation.PREFERRED)]
    trace.append(of(4, 9, Consolidation.ANY))

    assert [(j.id, most) for j, most in unplaceable_jobs(trace, cluster)] == [(2, 4), (4, 8)]
