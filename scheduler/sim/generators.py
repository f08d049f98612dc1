"""Synthetic Philly-like traces: heavy-tailed GPU-time, 1–16 GPUs, dense arrivals.

The public Tiresias trace (60_job.csv) never contends; the paper's claims are about
contended production clusters (Microsoft Philly). This generator builds such a trace from
public data only:

1. GPU-time per job is sampled (with replacement) from the YARN production distribution
   `yarn-gput5000.csv` (GPU·s; min 121, median ≈ 2.2k, p99 ≈ 2.3M: extremely heavy-tailed).
2. GPU count is drawn from `gpu_mix` [1: 55 %, 2: 15 %, 4: 15 %, 8: 10 %, 16: 5 %], the
   Philly shape (most jobs single-GPU, a tail of large distributed jobs); duration is
   GPU-time / GPUs, so a 16-GPU job is not automatically the longest one.
3. Arrivals are Poisson with the rate that makes the offered load `load` × cluster GPUs:
   mean gap = Σ GPU-time / (n × GPUs × load) over the drawn jobs. With a tail this heavy
   the load comes in bursts (a 16-GPU job of a million GPU·s holds its GPUs for 17 hours),
   so at load ≈ 1 the demand exceeds the cluster for long stretches while the average
   utilization stays moderate. `load_quantile` < 1 computes the rate from GPU-times
   clipped at that quantile instead (much denser arrivals for the same `load`).
4. Jobs belong to `num_users` users drawn with Zipf weights (a few heavy users), so the
   fairness index and fair share have something to measure.

Everything is seeded (`random.Random(seed)`): the same arguments give the same trace.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from scheduler.sim.traces import TraceError, TraceJob

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_GPUT = REPO_ROOT / "scheduler" / "data" / "yarn-gput5000.csv"  # a copy: runs anywhere
DEFAULT_GPU_MIX: Mapping[int, float] = {1: 0.55, 2: 0.15, 4: 0.15, 8: 0.10, 16: 0.05}
MODELS = ("resnet50", "vgg16", "inception3", "alexnet", "resnet152", "vgg19", "googlenet")


def load_gpu_times(path: str | Path = DEFAULT_GPUT) -> list[float]:
    """GPU-seconds per job from a Tiresias `yarn-gput*.csv` (one `duration` column)."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or "duration" not in reader.fieldnames:
                raise TraceError(f"{path}:1: expected a 'duration' column")
            values = []
            for row in reader:
                raw = (row.get("duration") or "").strip()
                try:
                    value = float(raw)
                except ValueError:
                    raise TraceError(
                        f"{path}:{reader.line_num}: field 'duration' is not a number: {raw!r}"
                    ) from None
                if value <= 0:
                    raise TraceError(f"{path}:{reader.line_num}: field 'duration' must be > 0")
                values.append(value)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not values:
        raise TraceError(f"{path}: no GPU-time samples")
    return values


def philly_like(
    num_jobs: int,
    cluster_gpus: int,
    *,
    load: float = 1.2,
    seed: int = 0,
    gpu_mix: Mapping[int, float] = DEFAULT_GPU_MIX,
    gpu_times: Sequence[float] | None = None,
    num_users: int = 12,
    max_gpu_time: float | None = None,
    load_quantile: float = 1.0,
) -> list[TraceJob]:
    """A seeded contended trace (see the module docstring).

    `max_gpu_time` optionally clips the tail (GPU·s), e.g. to keep a benchmark's makespan
    bounded; experiments that compare schedulers keep the full tail (None).
    """
    if num_jobs < 1:
        raise ValueError("num_jobs must be >= 1")
    if load <= 0:
        raise ValueError("load must be > 0")
    mix = {g: w for g, w in gpu_mix.items() if g <= cluster_gpus and w > 0}
    if not mix:
        raise ValueError(f"no GPU count in {dict(gpu_mix)} fits a {cluster_gpus}-GPU cluster")
    rng = random.Random(seed)
    samples = list(gpu_times) if gpu_times is not None else load_gpu_times()
    sizes = list(mix)
    weights = [mix[g] for g in sizes]
    user_weights = [1.0 / (rank + 1) for rank in range(num_users)]
    drafts = []
    for job_id in range(num_jobs):
        gput = rng.choice(samples)
        if max_gpu_time is not None:
            gput = min(gput, max_gpu_time)
        num_gpus = rng.choices(sizes, weights)[0]
        user = rng.choices(range(num_users), user_weights)[0]
        drafts.append((job_id, num_gpus, gput, user))
    # load_quantile < 1: the rate ignores the tail beyond that quantile (see point 3).
    ordered = sorted(samples)
    clip = ordered[min(len(ordered) - 1, int(load_quantile * (len(ordered) - 1)))]
    total = sum(min(gput, clip) for _, _, gput, _ in drafts)
    mean_gap = total / (num_jobs * cluster_gpus * load)
    jobs = []
    now = 0.0
    for job_id, num_gpus, gput, user in drafts:
        jobs.append(
            TraceJob(
                id=job_id,
                num_gpus=num_gpus,
                # Whole seconds, like the Tiresias traces (and exact float arithmetic).
                submit_time=float(round(now)),
                duration=float(max(1, round(gput / num_gpus))),
                model=MODELS[job_id % len(MODELS)],
                user=f"user{user:02d}",
            )
        )
        now += rng.expovariate(1.0 / mean_gap)
    return jobs
