"""Reproduction of the public Tiresias simulator's published average JCTs on 60_job.csv.

A correctness check against a published reference (issue 3), not a timing: reference mode
(3 queues at 3250/7200 GPU·s, knob off, free preemption, GPU-count placement, decisions
exactly at events) must land within 5 % of each number. gpulab reproduces them to the
printed precision.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.cli import build_parser, resolve, run_experiment
from scheduler.sim.metrics import summarize

# The repo carries a byte copy of the public trace (scheduler/data), so this check runs on
# any clone, with or without ../shared beside it.
TRACE = Path(__file__).resolve().parents[3] / "scheduler" / "data" / "tiresias_60_job.csv"

PUBLISHED = {
    "1,2,4,128,256": {"fifo": 1556.5, "las": 715.3, "srtf": 519.9, "srsf": 563.4},
    "1,4,4,128,256": {"fifo": 200.8, "las": 190.7, "srtf": 192.1},
}


@pytest.mark.parametrize("spec", sorted(PUBLISHED))
def test_reference_mode_reproduces_the_published_average_jcts(spec: str) -> None:
    options = build_parser().parse_args(
        [
            "--trace",
            str(TRACE),
            "--cluster",
            spec,
            "--policy",
            ",".join(PUBLISHED[spec]),
            "--tiresias-reference",
            "--no-progress",
        ]
    )
    results = run_experiment(resolve(options))
    for policy, published in PUBLISHED[spec].items():
        metrics = summarize(results[policy])
        assert metrics["jobs_finished"] == 60
        assert metrics["avg_jct"] == pytest.approx(published, rel=0.05), policy
        # Stronger than the 5 % the issue asks: equal at the printed precision.
        assert round(metrics["avg_jct"], 1) == published, policy
