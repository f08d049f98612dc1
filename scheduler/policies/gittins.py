"""Tiresias 2D-Gittins (NSDI'19, partial information), algorithms.md §1.

Inside each Tiresias queue, jobs go by Gittins index, highest first:

    G(a) = P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]

with a = the job's attained service (normalized GPU-seconds), S the job-size distribution
(GPU-seconds) and Δ the upper threshold of the job's queue. This uses the REMAINING size
S - a as the paper does; the public reference simulator sums raw sizes S (which inflates
E for large a) and uses one fixed Δ.

Choices documented here:
- the last queue has no upper threshold, so it uses the largest threshold as Δ; with a
  single queue (no thresholds) Δ is the distribution's median;
- a job that has already attained more than every observed size has no conditional
  distribution: G = 0 (heavy tail: it is most likely a very long job), FIFO among those.

The distribution is the lab's own finished jobs (`snapshot.finished_job_sizes`, the last
`gittins_history`), falling back to the shipped prior `yarn-gput1000.csv` until there are
`gittins_min_samples` of them. Evaluation is vectorized: sorted sizes + prefix sums +
`numpy.searchsorted`, O((jobs) log(sizes)).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from scheduler.core.types import Decisions, Job, Snapshot
from scheduler.policies.las import TiresiasQueues, decide_tiresias

PRIOR_FILE_NAME = "yarn-gput1000.csv"
_REPO_ROOT = Path(__file__).resolve().parents[2]
# The copy inside the package first (works in any deployment), then the shared trace folder
# next to the checkout (../shared/traces/tiresias/) that the copy was taken from.
PRIOR_CANDIDATES = (
    _REPO_ROOT / "scheduler" / "data" / PRIOR_FILE_NAME,
    _REPO_ROOT.parent / "shared" / "traces" / "tiresias" / PRIOR_FILE_NAME,
    _REPO_ROOT / "shared" / "traces" / "tiresias" / PRIOR_FILE_NAME,
)


class SizeDistribution:
    """An empirical job-size distribution prepared for fast Gittins evaluation."""

    __slots__ = ("prefix", "sizes")

    def __init__(self, sizes: Sequence[float]) -> None:
        values = np.sort(np.asarray(sizes, dtype=np.float64))
        if values.size == 0:
            raise ValueError("a size distribution needs at least one size")
        self.sizes = values
        # prefix[i] = sum of the i smallest sizes, so any range sum is one subtraction.
        self.prefix = np.concatenate(([0.0], np.cumsum(values)))

    def median(self) -> float:
        return float(np.median(self.sizes))

    def gittins(self, attained: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """G(a) for each (a, Δ) pair; 0 where no observed size exceeds a.

        With n = #{S > a}, count = #{a < S <= a + Δ} and the sums over the sorted array:
        P(S - a <= Δ | S > a) = count / n and
        E[min(S - a, Δ) | S > a] = (Σ_{a<S<=a+Δ} (S - a) + Δ x #{S > a + Δ}) / n,
        so n cancels and G = count / (partial_sum + Δ x beyond).
        """
        sizes, prefix = self.sizes, self.prefix
        total = sizes.size
        lo = np.searchsorted(sizes, attained, side="right")  # first S > a
        hi = np.searchsorted(sizes, attained + delta, side="right")  # first S > a + Δ
        count = hi - lo
        beyond = total - hi
        partial = prefix[hi] - prefix[lo] - attained * count
        expected = partial + delta * beyond
        with np.errstate(divide="ignore", invalid="ignore"):
            index = np.where(expected > 0, count / expected, 0.0)
        return np.where(lo < total, index, 0.0)


def prior_path() -> Path:
    """The shipped prior, resolved robustly (package copy, then the shared trace folder)."""
    for candidate in PRIOR_CANDIDATES:
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(c) for c in PRIOR_CANDIDATES)
    raise FileNotFoundError(f"Gittins prior {PRIOR_FILE_NAME} not found; looked in {searched}")


@lru_cache(maxsize=1)
def load_prior() -> SizeDistribution:
    """The Microsoft YARN GPU-time sample shipped with Tiresias (one `duration` column,
    GPU-seconds, CRLF line endings; see traces/tiresias/README.md). Read once."""
    with prior_path().open(newline="") as handle:
        sizes = [float(row["duration"]) for row in csv.DictReader(handle)]
    return SizeDistribution(sizes)


@lru_cache(maxsize=8)
def _learned(sizes: tuple[float, ...]) -> SizeDistribution:
    # Rounds repeat with the same history until a job finishes: cache on its value.
    return SizeDistribution(sizes)


def size_distribution(snapshot: Snapshot) -> SizeDistribution:
    """The lab's own distribution once it has enough finished jobs, else the prior."""
    settings = snapshot.settings
    history = snapshot.finished_job_sizes[-settings.gittins_history :]
    if settings.gittins_history <= 0 or len(history) < max(settings.gittins_min_samples, 1):
        return load_prior()
    return _learned(tuple(history))


def gittins_indices(jobs: Sequence[Job], levels: dict[int, int], snapshot: Snapshot) -> np.ndarray:
    """G(a) of each job with Δ = its queue's upper threshold (see the module docstring)."""
    distribution = size_distribution(snapshot)
    thresholds = snapshot.settings.queue_thresholds
    if thresholds:
        uppers = np.asarray((*thresholds, max(thresholds)), dtype=np.float64)
        delta = uppers[np.fromiter((levels[job.id] for job in jobs), np.int64, len(jobs))]
    else:
        delta = np.full(len(jobs), distribution.median())
    attained = np.fromiter((job.attained_service for job in jobs), np.float64, len(jobs))
    return distribution.gittins(attained, delta)


def decide_gittins(snapshot: Snapshot) -> Decisions:
    """2D-Gittins: Tiresias queues, Gittins index (highest first) inside each queue."""

    def by_gittins(jobs: Sequence[Job], queues: TiresiasQueues) -> list[tuple[float, ...]]:
        indices = gittins_indices(jobs, queues.levels, snapshot)
        entered_at = queues.entered_at
        return [
            (-float(index), entered_at[job.id], job.id)
            for index, job in zip(indices.tolist(), jobs, strict=True)
        ]

    return decide_tiresias(snapshot, by_gittins)
