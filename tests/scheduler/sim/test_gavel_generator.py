"""Gavel's workload generator: job types, durations, scale factors, Poisson arrivals."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from scheduler.sim.gavel import (
    JOB_TABLE,
    generate_jobs,
    sample_duration,
    sample_interarrival,
    sample_scale_factor,
    to_trace,
)
from scheduler.sim.throughputs import load_throughputs


def test_the_job_table_is_gavels_26_types_in_gavels_order() -> None:
    assert len(JOB_TABLE) == 26
    assert JOB_TABLE[0] == ("ResNet-18 (batch size 16)", True)
    assert JOB_TABLE[-2:] == (("A3C", False), ("CycleGAN", False))
    assert sum(not distributed for _, distributed in JOB_TABLE) == 7


def test_durations_are_80_percent_short_and_20_percent_long_in_log_space() -> None:
    rng = random.Random(1)
    minutes = [sample_duration(rng) / 60.0 for _ in range(20_000)]
    assert min(minutes) >= 10**1.5 and max(minutes) <= 10**4
    long_share = sum(m > 10**3 for m in minutes) / len(minutes)
    assert long_share == pytest.approx(0.2, abs=0.015)
    short_logs = [math.log10(m) for m in minutes if m <= 10**3]
    assert sum(short_logs) / len(short_logs) == pytest.approx(2.25, abs=0.02)  # U(1.5, 3)


@pytest.mark.parametrize(("jobs_per_hour"), [4.8, 5.6])
def test_arrivals_are_poisson_at_the_requested_rate(jobs_per_hour: float) -> None:
    rng = random.Random(3)
    gaps = [sample_interarrival(rng, jobs_per_hour) for _ in range(20_000)]
    assert sum(gaps) / len(gaps) == pytest.approx(3600.0 / jobs_per_hour, rel=0.03)
    # Exponential: the standard deviation equals the mean.
    mean = sum(gaps) / len(gaps)
    std = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert std == pytest.approx(mean, rel=0.05)


def test_scale_factors_follow_gavels_philly_split() -> None:
    rng = random.Random(5)
    counts = Counter(sample_scale_factor(rng) for _ in range(20_000))
    shares = {k: v / 20_000 for k, v in counts.items()}
    assert shares == pytest.approx({1: 0.7, 2: 0.1, 4: 0.15, 8: 0.05}, abs=0.015)


def test_generated_jobs_are_uniform_over_types_and_start_at_zero() -> None:
    jobs = generate_jobs(jobs_per_hour=5.6, seed=0, num_jobs=5_200)
    assert [job.index for job in jobs] == list(range(5_200))
    assert jobs[0].arrival == 0.0
    assert all(b.arrival >= a.arrival for a, b in itertools.pairwise(jobs))
    assert {job.scale_factor for job in jobs} == {1}
    counts = Counter(job.model for job in jobs)
    assert set(counts) == {model for model, _ in JOB_TABLE}
    expected = len(jobs) / 26
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 52.6  # 25 degrees of freedom, p = 0.001


@pytest.mark.parametrize(("seed"), [0, 1])
def test_the_same_seed_gives_the_same_stream_and_until_is_a_prefix(seed: int) -> None:
    full = generate_jobs(jobs_per_hour=4.8, seed=seed, num_jobs=300)
    again = generate_jobs(jobs_per_hour=4.8, seed=seed, num_jobs=300)
    assert full == again
    until = generate_jobs(jobs_per_hour=4.8, seed=seed, until=full[100].arrival)
    assert until == full[:100]
    assert generate_jobs(jobs_per_hour=4.8, seed=seed + 1, num_jobs=300) != full


def test_multi_gpu_jobs_only_use_distributed_types() -> None:
    distributed = {model for model, ok in JOB_TABLE if ok}
    jobs = generate_jobs(jobs_per_hour=5.6, seed=0, num_jobs=2_000, multi_gpu=True)
    assert {job.scale_factor for job in jobs} == {1, 2, 4, 8}
    assert all(job.model in distributed for job in jobs if job.scale_factor > 1)


def test_trace_jobs_carry_v100_duration_and_relative_throughputs() -> None:
    table = load_throughputs()
    jobs = generate_jobs(jobs_per_hour=5.6, seed=0, num_jobs=50)
    trace = to_trace(jobs, table)
    for job, trace_job in zip(jobs, trace, strict=True):
        assert trace_job.id == job.index
        assert trace_job.duration == job.duration
        assert trace_job.submit_time == job.arrival
        speeds = dict(trace_job.throughputs)
        assert speeds["v100"] == 1.0
        expected = table.get("k80", job.model) / table.get("v100", job.model)
        assert speeds["k80"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("users", "expected"), [("per-job", {"job0", "job1", "job2"}), ("shared", {"lab"})]
)
def test_jobs_are_their_own_users_or_share_one(users: str, expected: set[str]) -> None:
    jobs = generate_jobs(jobs_per_hour=5.6, seed=0, num_jobs=3)
    assert {job.user for job in to_trace(jobs, users=users)} == expected
    with pytest.raises(ValueError, match="per-job"):
        to_trace(jobs, users="nobody")
