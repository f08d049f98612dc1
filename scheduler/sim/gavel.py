"""Gavel's synthetic workload and its heterogeneity experiment (Narayanan et al., OSDI'20).

Gavel's simulator (`stanford-futuredata/gavel`, `scheduler/utils.py` `generate_job`,
`_generate_duration`, `_generate_scale_factor`; `scheduler/scheduler.py` `simulate`,
`_sample_arrival_time_delta`, `_initialize_seeds`; `scheduler/job_table.py`;
`scheduler/scripts/sweeps/run_sweep_continuous.py`) generates jobs on the fly:

1. Seeds: the job generator is `random.Random(seed + 2)`, the inter-arrival generator
   `random.Random(seed + 3)` (Gavel's `_initialize_seeds`). Both are Python's Mersenne
   Twister, so with the same draw order this module yields Gavel's exact job sequence.
2. Per job, from the job generator, in this order: a scale factor draw (Gavel draws it even
   for single-GPU runs, `always_generate_scale_factor`, then forces 1 unless multi-GPU jobs
   are on: 70% 1, 10% 2, 15% 4, 5% 8); a duration (`random() >= 0.8` -> 10^U(3, 4) minutes,
   else 10^U(1.5, 3) minutes: 80% / 20%); the job type, uniform over the 26 entries of Gavel's
   `JobTable` (re-drawn until it supports the scale factor).
3. The duration is measured on the reference V100: steps = duration × throughput on V100,
   so on type w the job needs duration × thr_v100 / thr_w seconds.
4. Arrivals are Poisson: the first job arrives at 0, each next one after
   -ln(1 - U) / rate seconds, rate = jobs_per_hour / 3600 (`lam = 3600 / jobs_per_hour`).
5. Gavel measures JCT over jobs with ids [4000, 5000) (`--window-start/--window-end`), keeping
   generating arrivals until all of them complete.

Here the jobs are pre-generated as a `TraceJob` list and replayed by gpulab's simulator
(`scheduler.sim.engine`) with the live policy code. Arrivals after the window's last job
still matter (they compete with it), so the trace extends `tail_hours` past the last window
arrival and the replay stops there; a window job still unfinished at that horizon is
reported as unfinished, never silently dropped.

Differences from Gavel's simulator that matter when reading the numbers: Gavel allocates in
360 s rounds with time-sharing (its LAS is max-min fairness over time fractions), gpulab runs
event-driven Tiresias (12 queues, FIFO within a queue, no time slicing) with a 30 s restore cost
per resume and a 5 min minimum runtime.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scheduler.core.types import Decisions, PlacementKind, SchedulerSettings, Snapshot
from scheduler.sim.throughputs import REFERENCE_TYPE, ThroughputTable, load_throughputs
from scheduler.sim.traces import TraceJob

if TYPE_CHECKING:
    from scheduler.sim.engine import JobRecord

# Gavel's JobTable, in its order (the order matters: `rng.choice` indexes into it).
# (model, distributed): Recommendation, A3C and CycleGAN only run on one GPU.
JOB_TABLE: tuple[tuple[str, bool], ...] = (
    *((f"ResNet-18 (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"ResNet-50 (batch size {b})", True) for b in (16, 32, 64, 128)),
    *((f"Transformer (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"LM (batch size {b})", True) for b in (5, 10, 20, 40, 80)),
    *((f"Recommendation (batch size {b})", False) for b in (512, 1024, 2048, 4096, 8192)),
    ("A3C", False),
    ("CycleGAN", False),
)

WINDOW = (4000, 5000)  # Gavel's measurement window (job ids, end exclusive)
PUBLISHED = {
    # Gavel paper, 36 V100 + 36 P100 + 36 K80, continuous single-GPU jobs, seed 0 (hours):
    # (average JCT, worst JCT) as quoted in issue 3.
    "gavel_las_agnostic": {"5.6": (35.8, 96.0)},
    "gavel_las_aware": {"5.6": (19.0, 29.0)},
    "allox": {"5.6": (20.9, 25.3)},
}


def sample_scale_factor(rng: random.Random) -> int:
    """Gavel's Philly-derived scale factor: 70% 1, 10% 2, 15% 4, 5% 8 (one uniform draw)."""
    r = rng.uniform(0, 1)
    if 0.7 <= r <= 0.8:
        return 2
    if 0.8 <= r <= 0.95:
        return 4
    if r >= 0.95:
        return 8
    return 1


def sample_duration(rng: random.Random) -> float:
    """Seconds on a V100: 20% 10^U(3, 4) minutes, 80% 10^U(1.5, 3) minutes."""
    if rng.random() >= 0.8:
        return 60.0 * 10 ** rng.uniform(3, 4)
    return 60.0 * 10 ** rng.uniform(1.5, 3)


def sample_interarrival(rng: random.Random, jobs_per_hour: float) -> float:
    """Poisson arrivals: exponential gap with rate jobs_per_hour / 3600 (inverse CDF)."""
    rate = jobs_per_hour / 3600.0
    return -math.log(1.0 - rng.random()) / rate


@dataclass(frozen=True, slots=True)
class GavelJob:
    index: int  # Gavel's job id (generation order)
    model: str
    scale_factor: int
    duration: float  # seconds on one reference V100 (× scale factor GPUs)
    arrival: float


def generate_jobs(
    *,
    jobs_per_hour: float,
    seed: int = 0,
    num_jobs: int | None = None,
    until: float | None = None,
    multi_gpu: bool = False,
) -> list[GavelJob]:
    """Gavel's job stream: `num_jobs` jobs, or every job arriving before `until` seconds.

    Steps (per job): scale factor draw, duration draw, job type draw, all from the job
    generator (seed + 2); then the next arrival from the inter-arrival generator (seed + 3).
    """
    if num_jobs is None and until is None:
        raise ValueError("give num_jobs or until")
    job_rng = random.Random(seed + 2)
    arrival_rng = random.Random(seed + 3)
    jobs: list[GavelJob] = []
    arrival = 0.0
    while (num_jobs is None or len(jobs) < num_jobs) and (until is None or arrival < until):
        scale_factor = sample_scale_factor(job_rng)
        duration = sample_duration(job_rng)
        if not multi_gpu:
            scale_factor = 1
        while True:
            model, distributed = job_rng.choice(JOB_TABLE)
            if scale_factor == 1 or distributed:
                break
        jobs.append(GavelJob(len(jobs), model, scale_factor, duration, arrival))
        arrival += sample_interarrival(arrival_rng, jobs_per_hour)
    return jobs


def to_trace(
    jobs: Sequence[GavelJob], table: ThroughputTable | None = None, *, users: str = "per-job"
) -> list[TraceJob]:
    """Gavel jobs as simulator trace jobs.

    `duration` stays V100 seconds (the reference type has relative throughput 1.0), and
    `throughputs` carries the measured speed on each type relative to V100 at the job's
    scale factor, so the engine runs it for duration / relative speed on each type.

    Gavel's jobs have no owners; `users` picks how that maps onto gpulab's accounts:
    - "per-job": every job is its own user. gpulab's fair share orders a queue by each
      user's decayed usage, so with one job per user it orders by the job's own attained
      service: least attained first inside each queue (plain LAS), which starves the
      longest jobs under load (bench/README-gavel.md);
    - "shared": one user for all jobs: fair share and AlloX's α are no-ops and each queue is
      FIFO by queue entry, Tiresias' 2D-LAS as specified.
    """
    if users not in ("per-job", "shared"):
        raise ValueError(f"users must be 'per-job' or 'shared', not {users!r}")
    table = table or load_throughputs()
    return [
        TraceJob(
            id=job.index,
            num_gpus=job.scale_factor,
            submit_time=job.arrival,
            duration=job.duration,
            model=job.model,
            user=f"job{job.index}" if users == "per-job" else "lab",
            throughputs=table.relative(job.model, job.scale_factor),
        )
        for job in jobs
    ]


@dataclass(frozen=True)
class GavelRun:
    """One (policy, load) cell of the experiment."""

    label: str
    jobs_per_hour: float
    avg_jct_hours: float
    worst_jct_hours: float
    finished: int
    unfinished: int
    wall_seconds: float
    extra: dict[str, float]


def experiment_settings(placement: PlacementKind, **overrides: object) -> SchedulerSettings:
    """gpulab's default settings with `placement`; `las` is the default policy."""
    return replace(SchedulerSettings(), placement=placement, **overrides)  # type: ignore[arg-type]


def run_cell(
    label: str,
    settings: SchedulerSettings,
    *,
    jobs_per_hour: float,
    seed: int = 0,
    window: tuple[int, int] = WINDOW,
    tail_hours: float = 400.0,
    counts: dict[str, int] | None = None,
    tick: float = 10.0,
    progress: bool = False,
    decide: Callable[[Snapshot], Decisions] | None = None,
    users: str = "per-job",
    records_out: list[JobRecord] | None = None,
) -> GavelRun:
    """Replay Gavel's workload under `settings`; JCT statistics over the window jobs.

    Steps:
    1. Generate the job stream up to `tail_hours` after the last window job arrives.
    2. Replay it on Gavel's cluster with the live policy (`scheduler.policies.decide`, or
       `decide` when given), stopping at that horizon or as soon as every window job has
       finished, whichever comes first.
    3. Average and maximum JCT of jobs [window[0], window[1]), in hours.

    `records_out`, when given, receives every job's record (for per-job analysis).
    """
    from scheduler.sim.engine import SimConfig, simulate
    from scheduler.sim.throughputs import gavel_cluster

    table = load_throughputs()
    head = generate_jobs(jobs_per_hour=jobs_per_hour, seed=seed, num_jobs=window[1])
    last_window_arrival = head[-1].arrival
    horizon = last_window_arrival + tail_hours * 3600.0
    jobs = generate_jobs(jobs_per_hour=jobs_per_hour, seed=seed, until=horizon)
    trace = to_trace(jobs, table, users=users)
    cluster = gavel_cluster(counts, table=table)
    config = SimConfig(
        tick=tick,
        check_invariants=False,
        horizon=horizon,
        progress=progress,
        progress_desc=f"{label} @ {jobs_per_hour}/h",
        # Later arrivals cannot change the window's JCTs: stop once the window is done.
        stop_when_finished=frozenset(range(window[0], window[1])),
    )
    result = simulate(trace, cluster, settings, config=config, decide=decide)
    if records_out is not None:
        records_out.extend(result.records)
    in_window = [r for r in result.records if window[0] <= r.id < window[1]]
    done = [r.jct for r in in_window if r.jct is not None]
    unfinished = len(in_window) - len(done)
    avg = sum(done) / len(done) / 3600.0 if done else math.nan
    worst = max(done) / 3600.0 if done else math.nan
    if unfinished:
        avg = worst = math.inf
    # Unfinished window jobs have run at least until the horizon: a censored lower bound.
    censored = [r.jct if r.jct is not None else horizon - r.submit_time for r in in_window]
    extra = {
        "avg_jct_lower_bound_hours": sum(censored) / len(censored) / 3600.0,
        "worst_jct_lower_bound_hours": max(censored) / 3600.0,
        "jobs_simulated": float(len(result.records)),
        "window_preemptions": float(sum(r.preemptions for r in in_window)),
        "window_median_jct_hours": _median(done) / 3600.0 if done else math.nan,
        "window_avg_queueing_hours": (
            sum(r.queueing_delay for r in in_window) / len(in_window) / 3600.0
        ),
        "rounds": float(result.rounds),
        # Each window job alone on its fastest type from arrival: no scheduler does better.
        "window_avg_ideal_hours": sum(r.ideal_runtime for r in in_window) / len(in_window) / 3600,
        "window_max_ideal_hours": max(r.ideal_runtime for r in in_window) / 3600.0,
    }
    return GavelRun(
        label=label,
        jobs_per_hour=jobs_per_hour,
        avg_jct_hours=avg,
        worst_jct_hours=worst,
        finished=len(done),
        unfinished=unfinished,
        wall_seconds=result.wall_seconds,
        extra=extra,
    )


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return 0.5 * (ordered[middle - 1] + ordered[middle])


__all__ = [
    "JOB_TABLE",
    "PUBLISHED",
    "REFERENCE_TYPE",
    "WINDOW",
    "GavelJob",
    "GavelRun",
    "experiment_settings",
    "generate_jobs",
    "run_cell",
    "sample_duration",
    "sample_interarrival",
    "sample_scale_factor",
    "to_trace",
]
