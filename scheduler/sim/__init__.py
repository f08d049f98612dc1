"""Trace-driven simulator: the live policies replayed over a job trace, without Django.

Entry points: `simulate(trace, cluster, settings)` (engine.py), the CLI in cli.py
(`python -m scheduler.sim`, `manage.py simulate`). Nothing here imports Django: the
architecture test forbids it, and the simulator must run where no database exists.
"""

from __future__ import annotations

from scheduler.sim.clusters import SimCluster, homogeneous_cluster, load_cluster
from scheduler.sim.engine import JobRecord, SimConfig, SimResult, Simulation, simulate
from scheduler.sim.metrics import summarize
from scheduler.sim.traces import TraceError, TraceJob, load_tiresias_trace, scale_durations

__all__ = [
    "JobRecord",
    "SimCluster",
    "SimConfig",
    "SimResult",
    "Simulation",
    "TraceError",
    "TraceJob",
    "homogeneous_cluster",
    "load_cluster",
    "load_tiresias_trace",
    "scale_durations",
    "simulate",
    "summarize",
]
