"""What `fluid.py` and `rounds.py` share: Gavel's cluster, the job stream, the output."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from scheduler.sim.gavel import WINDOW, GavelJob, generate_jobs  # noqa: E402
from scheduler.sim.throughputs import load_throughputs  # noqa: E402

TYPES = ("v100", "p100", "k80")  # Gavel's order for 'Perf' policies (no shuffle)
DEVICES_PER_TYPE = 36


def job_stream(
    jobs_per_hour: float, seed: int, tail_hours: float
) -> tuple[list[GavelJob], dict[int, np.ndarray], float]:
    """gpulab's Gavel job stream (bench/gavel.py's), each job's speeds on TYPES, horizon.

    The stream runs `tail_hours` past the last window job's arrival, like `run_cell`.
    """
    table = load_throughputs()
    head = generate_jobs(jobs_per_hour=jobs_per_hour, seed=seed, num_jobs=WINDOW[1])
    horizon = head[-1].arrival + tail_hours * 3600.0
    jobs = generate_jobs(jobs_per_hour=jobs_per_hour, seed=seed, until=horizon)
    by_model = {}
    for job in jobs:
        if job.model not in by_model:
            relative = dict(table.relative(job.model, 1))
            by_model[job.model] = np.array([relative.get(t, 0.0) for t in TYPES])
    return jobs, {job.index: by_model[job.model] for job in jobs}, horizon


def progress(now: float, active: int, done: int) -> None:
    """One progress line on stderr (replays take minutes)."""
    print(f"t={now / 3600:.0f} h active={active} done={done}", file=sys.stderr)


def window_summary(finished: dict[int, float]) -> dict[str, float | int]:
    """JCT statistics (hours) over the window jobs; avg and worst are inf if any is missing."""
    jcts = sorted(finished[i] / 3600.0 for i in range(*WINDOW) if i in finished)
    unfinished = (WINDOW[1] - WINDOW[0]) - len(jcts)
    complete = bool(jcts) and not unfinished
    return {
        "window_finished": len(jcts),
        "window_unfinished": unfinished,
        "avg_jct_hours": sum(jcts) / len(jcts) if complete else math.inf,
        "worst_jct_hours": jcts[-1] if complete else math.inf,
        "median_jct_hours": jcts[len(jcts) // 2] if jcts else math.nan,
    }


def emit(result: dict, jsonl: Path | None) -> None:
    """Print one run's result, and append it to `jsonl` when given."""
    print(json.dumps(result))
    if jsonl:
        with jsonl.open("a") as handle:
            handle.write(json.dumps(result) + "\n")


__all__ = [
    "DEVICES_PER_TYPE",
    "TYPES",
    "WINDOW",
    "emit",
    "job_stream",
    "progress",
    "window_summary",
]
