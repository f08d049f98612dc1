"""Start-time forecasts: the live snapshot replayed forward through the same policy.

Slurm's `squeue --start` is the only peer that answers "when will my job start?", and its
answer comes from the backfill plan. gpulab's scheduler has no plan: a Tiresias round
decides only now. So the forecast runs the scheduler itself forward: the simulator's
engine starts from the live snapshot (`engine.Seed`), lets running jobs end when their
work is done, and calls the configured `decide` at every completion and timer moment,
exactly as the live loop would, until every pending job has started.

What it assumes, and so what a reader of its answer must know:

- a job runs for the seconds the caller says (`work_left`): its walltime left, or an
  estimate where it has none;
- nothing new is submitted (under LAS a new job enters the highest-priority queue, so
  later submissions can only delay a forecast start; accuracy is measured, not promised);
- a PREEMPTING job leaves its GPUs when its grace ends (`stopping_left`), and is not
  forecast itself (it is not pending yet);
- GPUs held by no job (an old process not yet confirmed gone) are free.

Pure Python (no Django), deterministic: the same snapshot and work give the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scheduler.core.types import Job, JobPhase, Snapshot
from scheduler.sim.clusters import SimCluster
from scheduler.sim.engine import USAGE_HALF_LIFE, Seed, SimConfig, Simulation, unplaceable_jobs
from scheduler.sim.traces import TraceJob


@dataclass(frozen=True)
class Forecast:
    """Predicted first start (epoch seconds) per pending job; absent = not within the
    forecast (`stop_reason` says why: horizon, budget, or no placement ever)."""

    starts: Mapping[int, float]
    stop_reason: str
    rounds: int
    wall_seconds: float
    # Pending jobs no schedulable GPUs could ever hold (too many GPUs of the types they
    # accept, or not on one node where they must be): not waited for.
    never: frozenset[int] = frozenset()


def forecast_starts(
    snapshot: Snapshot,
    *,
    work_left: Mapping[int, float],
    stopping_left: float,
    horizon: float,
    tick: float,
    wall_budget: float | None = None,
    usage_half_life: float = USAGE_HALF_LIFE,
) -> Forecast:
    """When each pending job of `snapshot` starts if the scheduler runs on as it is.

    `work_left`: wall seconds each job of the snapshot still runs (running: from now;
    pending: once started). `stopping_left`: seconds until a PREEMPTING job's GPUs are
    free. `horizon`: simulated seconds after `snapshot.now` to look ahead. `tick`: the live
    loop's round interval (its timer moments). `usage_half_life`: fair-share usage decay.
    """
    cluster = SimCluster(devices=snapshot.devices, nodes=snapshot.nodes, name="live")
    never = _never_placed(snapshot)
    # A job that can never start would keep the replay going to its horizon or budget.
    pending = frozenset(
        job.id for job in snapshot.jobs if job.phase is JobPhase.PENDING and job.id not in never
    )
    if not pending:
        return Forecast(
            starts={}, stop_reason="no pending job", rounds=0, wall_seconds=0.0, never=never
        )
    # A PREEMPTING job holds its GPUs until it stops: a running job that nothing may
    # preempt, ending when its grace does.
    stopping = tuple(
        Job(
            id=stopping_job.id,
            user=stopping_job.user,
            group=stopping_job.group,
            num_gpus=len(stopping_job.devices),
            submit_time=snapshot.now,
            phase=JobPhase.RUNNING,
            devices=stopping_job.devices,
            started_at=snapshot.now,
            preemptible=False,
        )
        for stopping_job in snapshot.stopping_jobs
        if stopping_job.devices
    )
    work = dict(work_left)
    for job in stopping:
        work[job.id] = stopping_left
    seeded = replace(
        snapshot,
        jobs=snapshot.jobs + stopping,
        stopping_jobs=(),
        busy_device_ids=frozenset(),
    )
    config = SimConfig(
        tick=tick,
        horizon=horizon,
        stop_when_started=pending,
        wall_budget=wall_budget,
        usage_half_life=usage_half_life,
    )
    result = Simulation(
        (), cluster, snapshot.settings, config=config, seed=Seed(seeded, work)
    ).run()
    starts = {
        record.id: record.first_start
        for record in result.records
        if record.id in pending
        and record.first_start is not None
        and math.isfinite(record.first_start)
    }
    return Forecast(
        starts=starts,
        stop_reason=result.stop_reason,
        rounds=result.rounds,
        wall_seconds=result.wall_seconds,
        never=never,
    )


def _never_placed(snapshot: Snapshot) -> frozenset[int]:
    """Pending jobs of `snapshot` that its schedulable GPUs (on nodes that take work)
    could never hold at once (`engine.unplaceable_jobs`)."""
    up = {node.name for node in snapshot.nodes if node.schedulable}
    usable = SimCluster(
        devices=tuple(d for d in snapshot.devices if d.schedulable and d.node in up),
        nodes=snapshot.nodes,
        name="usable",
    )
    asked = [
        TraceJob(
            id=job.id,
            num_gpus=job.num_gpus,
            submit_time=job.submit_time,
            duration=0.0,
            consolidation=job.consolidation,
            accepted_types=job.accepted_types,
        )
        for job in snapshot.jobs
        if job.phase is JobPhase.PENDING
    ]
    return frozenset(job.id for job, _ in unplaceable_jobs(asked, usable))
