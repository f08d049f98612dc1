"""Start-time forecasts (scheduler.sim.forecast): the live snapshot replayed forward.

Hand-made snapshots with known answers: who holds what, for how long, and when each
pending job must start under the configured policy.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.types import Account, Node, Quota, StoppingJob
from scheduler.sim.forecast import forecast_starts
from tests.scheduler.builders import REQUIRED, devices, pending, running, snapshot

NOW = 10_000.0


def _forecast(snap, work, *, stopping_left=60.0, horizon=7 * 24 * 3600.0, tick=0.0):
    return forecast_starts(
        snap, work_left=work, stopping_left=stopping_left, horizon=horizon, tick=tick
    )


def test_a_job_that_fits_now_starts_now():
    snap = snapshot([pending(1, 2)], devices({"n1": ("a100", 4)}), now=NOW)
    assert _forecast(snap, {1: 600.0}).starts == {1: NOW}


def test_jobs_start_as_the_ones_before_them_end():
    # 4 GPUs, all held for 100 s more; two 4-GPU jobs wait in line.
    snap = snapshot(
        [running(1, range(4), started_at=NOW - 50), pending(2, 4), pending(3, 4)],
        devices({"n1": ("a100", 4)}),
        now=NOW,
        policy="fifo",
    )
    forecast = _forecast(snap, {1: 100.0, 2: 50.0, 3: 10.0})
    assert forecast.starts == {2: NOW + 100, 3: NOW + 150}
    assert forecast.stop_reason == "every watched job started"


def test_the_policy_decides_the_order():
    # One GPU busy for 100 s; a 4-GPU job waits ahead of a 1-GPU one. Strict FIFO blocks
    # the small job behind the big one; backfill starts it at once.
    jobs = [running(1, [0], started_at=NOW), pending(2, 4), pending(3, 1)]
    work = {1: 100.0, 2: 500.0, 3: 10.0}
    cluster = devices({"n1": ("a100", 4)})
    strict = _forecast(snapshot(jobs, cluster, now=NOW, policy="fifo"), work)
    backfill = _forecast(snapshot(jobs, cluster, now=NOW, policy="fifo-backfill"), work)
    assert strict.starts == {2: NOW + 100, 3: NOW + 600}
    assert backfill.starts == {2: NOW + 100, 3: NOW}


def test_quotas_hold_in_the_forecast():
    # Alice may hold 2 GPUs and holds them for 300 s more: her next job waits for them
    # although 2 GPUs are free.
    snap = snapshot(
        [running(1, [0, 1], started_at=NOW), pending(2, 2)],
        devices({"n1": ("a100", 4)}),
        now=NOW,
        users=[Account(name="alice", quota=Quota(max_gpus=2))],
    )
    assert _forecast(snap, {1: 300.0, 2: 60.0}).starts == {2: NOW + 300}


def test_a_job_that_ran_before_pays_the_restore_cost():
    # Job 2 was preempted before: resuming costs 30 s, so it frees its GPUs for job 3
    # 30 s later than its work alone says.
    snap = snapshot(
        [pending(2, 4, attained_service=500.0, submit_time=1.0), pending(3, 4)],
        devices({"n1": ("a100", 4)}),
        now=NOW,
        policy="fifo",
        restore_cost=30.0,
    )
    assert _forecast(snap, {2: 100.0, 3: 10.0}).starts == {2: NOW, 3: NOW + 130}


def test_a_preempting_job_frees_its_gpus_when_its_grace_ends():
    snap = replace(
        snapshot([pending(2, 4)], devices({"n1": ("a100", 4)}), now=NOW),
        stopping_jobs=(StoppingJob(id=1, user="bob", group=None, devices=(0, 1)),),
        busy_device_ids=frozenset({0, 1}),
    )
    assert _forecast(snap, {2: 60.0}, stopping_left=45.0).starts == {2: NOW + 45}


def test_timer_moments_follow_the_round_interval():
    # With a 10 s round interval, a job whose GPUs free up mid-interval still starts at the
    # completion (an event round), not at the next tick.
    snap = snapshot(
        [running(1, range(4), started_at=NOW), pending(2, 4)],
        devices({"n1": ("a100", 4)}),
        now=NOW,
        policy="fifo",
    )
    assert _forecast(snap, {1: 73.0, 2: 5.0}, tick=10.0).starts == {2: NOW + 73}


def test_a_job_not_started_within_the_horizon_gets_no_forecast():
    snap = snapshot(
        [running(1, range(4), started_at=NOW), pending(2, 4)],
        devices({"n1": ("a100", 4)}),
        now=NOW,
    )
    forecast = _forecast(snap, {1: 1000.0, 2: 10.0}, horizon=500.0)
    assert forecast.starts == {}
    assert forecast.stop_reason == "horizon of 500 s reached"


def test_a_job_no_gpu_that_is_up_could_hold_is_not_waited_for():
    # Job 2 needs 8 GPUs of a 4-GPU cluster; job 3 needs 3 v100s on one node, and the only
    # v100 node is drained; job 4 needs 2 h100s, and one of the two is cordoned.
    # Job 5 fits: the replay stops once it starts instead of running to its horizon.
    cluster = devices({"n1": ("a100", 4), "n2": ("v100", 4), "n3": ("h100", 2)})
    cordoned = tuple(
        replace(device, schedulable=False) if device.id == 8 else device for device in cluster
    )
    snap = snapshot(
        [
            running(1, range(4), started_at=NOW),
            pending(2, 8),
            pending(3, 3, accepted_types=("v100",), consolidation=REQUIRED),
            pending(4, 2, accepted_types=("h100",)),
            pending(5, 4, accepted_types=("a100",)),
        ],
        cordoned,
        now=NOW,
        nodes=[Node("n1"), Node("n2", schedulable=False), Node("n3")],
        policy="fifo-backfill",
    )
    forecast = _forecast(snap, {1: 100.0, 2: 10.0, 3: 10.0, 4: 10.0, 5: 10.0})
    assert forecast.never == {2, 3, 4}
    assert forecast.starts == {5: NOW + 100}
    assert forecast.stop_reason == "every watched job started"


def test_las_preempts_in_the_forecast_as_it_would_live():
    # Tiresias rules: a job that attained far more service than a new one is preempted for
    # it once the minimum runtime is over, so the new job starts then, not when the old
    # one's long run ends.
    snap = snapshot(
        [
            running(
                1,
                range(4),
                started_at=NOW - 10,
                attained_service=10**6,
                service_since_promotion=10**6,
                queue_level=1,
            ),
            pending(2, 4, submit_time=NOW - 5),
        ],
        devices({"n1": ("a100", 4)}),
        now=NOW,
        min_runtime=120.0,
    )
    assert _forecast(snap, {1: 5000.0, 2: 60.0}).starts == {2: NOW + 110}


def test_the_same_snapshot_gives_the_same_forecast():
    jobs = [running(1, [0, 1], started_at=NOW)] + [pending(i, 1 + i % 3) for i in range(2, 30)]
    snap = snapshot(jobs, devices({"n1": ("a100", 4), "n2": ("v100", 4)}), now=NOW)
    work = {job.id: 60.0 * (1 + job.id % 7) for job in jobs}
    first, second = _forecast(snap, work, tick=10.0), _forecast(snap, work, tick=10.0)
    assert first.starts == second.starts
    assert len(first.starts) == 28
    assert all(start >= NOW for start in first.starts.values())
