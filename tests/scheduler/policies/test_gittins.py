"""2D-Gittins: the index on remaining size, the prior fallback and the learned distribution."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.policies import decide
from scheduler.policies.gittins import (
    SizeDistribution,
    load_prior,
    prior_path,
    size_distribution,
)
from tests.scheduler.builders import devices, pending, snapshot, started

ONE_NODE = devices({"n1": ("a100", 8)})


def brute_force_gittins(sizes: list[float], attained: float, delta: float) -> float:
    """G(a) = P(S - a <= D | S > a) / E[min(S - a, D) | S > a], straight from the paper."""
    alive = [s for s in sizes if s > attained]
    if not alive:
        return 0.0
    done_within = sum(1 for s in alive if s - attained <= delta) / len(alive)
    expected = sum(min(s - attained, delta) for s in alive) / len(alive)
    return done_within / expected


@pytest.mark.parametrize(
    ("sizes", "attained", "delta"),
    [
        ([100.0, 200.0, 400.0, 5000.0], 0.0, 300.0),
        ([100.0, 200.0, 400.0, 5000.0], 150.0, 300.0),  # remaining, not raw, sizes matter
        ([100.0, 200.0, 400.0, 5000.0], 4000.0, 300.0),
        ([100.0, 200.0, 400.0, 5000.0], 5000.0, 300.0),  # beyond every size: 0
        ([50.0, 50.0, 50.0, 3000.0, 3000.0], 49.0, 3600.0),
        ([10.0 * i for i in range(1, 200)], 777.0, 123.0),
    ],
)
def test_the_vectorized_index_matches_the_papers_definition(
    sizes: list[float], attained: float, delta: float
) -> None:
    got = SizeDistribution(sizes).gittins(np.array([attained]), np.array([delta]))[0]
    assert got == pytest.approx(brute_force_gittins(sizes, attained, delta))


def test_the_shipped_prior_is_the_tiresias_yarn_sample() -> None:
    prior = load_prior()
    assert prior_path().name == "yarn-gput1000.csv"
    assert prior.sizes.size == 1001
    assert prior.sizes[0] == 121.0
    assert prior.sizes[-1] == 53_294_624.0
    assert load_prior() is prior  # read once


@pytest.mark.parametrize(
    ("finished", "min_samples", "uses_prior"),
    [
        ((), 50, True),
        ((1000.0,) * 49, 50, True),
        ((1000.0,) * 50, 50, False),
        ((1000.0,) * 5, 5, False),
    ],
)
def test_it_uses_the_prior_until_enough_jobs_have_finished(
    finished: tuple[float, ...], min_samples: int, uses_prior: bool
) -> None:
    snap = snapshot([], ONE_NODE, finished=finished, gittins_min_samples=min_samples)
    assert (size_distribution(snap) is load_prior()) is uses_prior


def test_it_learns_only_from_the_most_recent_history() -> None:
    finished = (1e9,) * 10 + (1000.0,) * 50
    snap = snapshot([], ONE_NODE, finished=finished, gittins_history=50)
    assert size_distribution(snap).sizes.max() == 1000.0


@pytest.mark.parametrize(
    ("finished", "expected_first"),
    [
        # Prior (heavy tail, few samples): the index falls with attained service, so the
        # fresh job 1 goes first.
        ((1000.0,) * 49, 1),
        # Learned: every job takes 1000 GPU-s, so job 2 (900 attained) is nearly done.
        ((1000.0,) * 50, 2),
    ],
)
def test_gittins_orders_by_index_from_the_prior_or_the_learned_distribution(
    finished: tuple[float, ...], expected_first: int
) -> None:
    jobs = [
        pending(1, 8, submit_time=1.0, attained_service=0.0),
        pending(2, 8, submit_time=2.0, attained_service=900.0, service_since_promotion=900.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, policy="gittins", finished=finished))
    assert decisions.order[0] == expected_first
    assert set(started(decisions)) == {expected_first}


def test_gittins_ranks_ten_thousand_jobs_in_one_vectorized_call() -> None:
    prior = load_prior()
    attained = np.linspace(0.0, 1e6, 10_000)
    indices = prior.gittins(attained, np.full(10_000, 3600.0))
    assert indices.shape == (10_000,)
    assert np.all(np.isfinite(indices)) and np.all(indices >= 0.0)
