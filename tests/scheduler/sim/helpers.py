"""Small builders shared by the simulator tests (no Django, no files unless asked)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.types import PlacementKind, SchedulerSettings
from scheduler.sim.clusters import SimCluster, homogeneous_cluster
from scheduler.sim.engine import SimConfig, SimResult, simulate
from scheduler.sim.traces import TraceJob


def job(job_id: int, gpus: int, submit: float, duration: float, **extra: object) -> TraceJob:
    return TraceJob(id=job_id, num_gpus=gpus, submit_time=submit, duration=duration, **extra)


def reference_settings(policy: str, **overrides: object) -> SchedulerSettings:
    """The Tiresias reference setting: exact, free preemption, no knob, count placement."""
    values: dict[str, object] = {
        "policy": policy,
        "placement": PlacementKind.GPU_COUNT,
        "queue_thresholds": (3250.0, 7200.0),
        "promote_knob": None,
        "fairness": 0.0,
        "min_runtime": 0.0,
        "restore_cost": 0.0,
        "preempt_patience": 0.0,
        "preempt_margin": 1,
        "max_victims": 0,
        "starvation_seconds": 0.0,
    }
    values.update(overrides)
    return SchedulerSettings(**values)  # type: ignore[arg-type]


def run(
    jobs: Sequence[TraceJob],
    settings: SchedulerSettings,
    cluster: SimCluster | None = None,
    *,
    tick: float = 0.0,
) -> SimResult:
    return simulate(
        jobs,
        cluster or homogeneous_cluster(1, 2),
        settings,
        config=SimConfig(tick=tick, check_invariants=True),
    )


def jcts(result: SimResult) -> dict[int, float | None]:
    return {record.id: record.jct for record in result.records}
