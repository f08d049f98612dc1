"""Device-type prices from the backlog: which jobs a device type is worth under a queue.

Under a queue, a device of type t given to job j is a device nobody else gets, so what j
gains there is only half the story: a Recommendation model runs 1.4x as fast on a K80 as on
a V100 and a ResNet-50 0.14x, so a K80 is worth ten times more to the first. Gavel (OSDI'20)
gets this right by solving an allocation LP over all jobs every round and time-slicing along
it; gpulab commits a job to one type for its run, so it needs the LP's other half, the
prices, to decide which waiting jobs a freed device should even consider.

The LP (minimum makespan of the current backlog, fractional):

    maximize θ  subject to
        Σ_t r[g, t] · x[g, t] ≥ θ · W[g]    for every group g  (jobs with one speed profile)
        Σ_g x[g, t] ≤ N[t]                   for every type t   (devices of the type)
        x ≥ 0

r[g, t] = the group's speed on t relative to the reference, W[g] = its jobs' expected
remaining work (reference GPU-seconds), N[t] = schedulable devices of t. The duals π[t] of
the capacity rows are the prices. A job's efficiency on t is its work per price there
against its best type's:

    e[j, t] = (r[j, t] / π[t]) / max over priced t' of (r[j, t'] / π[t'])

Complementary slackness makes e = 1 on every type the LP uses for the job's group, so
"only types with e ≥ gate" keeps placements where the LP puts them, while a gate below 1
leaves room for the estimates' noise. A type whose price is 0 is in surplus even in the LP:
it is open to every job.

Pure Python + scipy; deterministic (HiGHS with fixed input order).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from scheduler.core.types import Device

# Groups are speed profiles rounded to this many decimals, so jobs of one model share a row
# and the LP stays small (26 rows on Gavel's workload) whatever the queue length.
_PROFILE_DECIMALS = 3
# A price below this (relative to the largest) counts as zero: the type is in surplus.
_ZERO_PRICE = 1e-6


@dataclass(frozen=True, slots=True)
class TypePrices:
    """Dual prices of device types for one backlog (`backlog_prices`)."""

    prices: dict[str, float]  # type -> price, largest = 1

    def efficiency(self, speeds: dict[str, float]) -> dict[str, float]:
        """e[t] for a job with `speeds` (type -> relative speed; types it cannot use absent)."""
        priced = [
            speed / self.prices[t]
            for t, speed in speeds.items()
            if speed > 0 and self.prices.get(t, 0.0) > _ZERO_PRICE
        ]
        best = max(priced, default=0.0)
        result: dict[str, float] = {}
        for t, speed in speeds.items():
            price = self.prices.get(t, 0.0)
            if speed <= 0:
                continue
            if price <= _ZERO_PRICE or best <= 0:
                result[t] = 1.0
            else:
                result[t] = (speed / price) / best
        return result

    def eligible(self, speeds: dict[str, float], gate: float) -> tuple[str, ...]:
        """Types where a job with `speeds` is at least `gate` efficient (sorted)."""
        return tuple(sorted(t for t, e in self.efficiency(speeds).items() if e >= gate - 1e-12))


def backlog_prices(
    jobs: Iterable[tuple[dict[str, float], float]],
    devices: Sequence[Device],
) -> TypePrices | None:
    """Prices for `jobs` = (speed profile, expected remaining work) on `devices`.

    Returns None when there is nothing to price (one device type, or no work).
    """
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.device_type] = counts.get(device.device_type, 0) + 1
    types = sorted(counts)
    if len(types) < 2:
        return None
    parts: dict[tuple[float, ...], list[float]] = {}
    for speeds, remaining in jobs:
        profile = tuple(round(max(speeds.get(t, 0.0), 0.0), _PROFILE_DECIMALS) for t in types)
        if not any(profile) or remaining <= 0:
            continue
        parts.setdefault(profile, []).append(remaining)
    if not parts:
        return None
    # Exact sums (fsum) so the LP's input, hence the prices, do not depend on the order the
    # backlog is listed in: a float running sum rounds differently per order.
    profiles = sorted(parts)
    work = {profile: math.fsum(parts[profile]) for profile in profiles}
    total = math.fsum(work.values())
    n_groups, n_types = len(profiles), len(types)
    n_vars = n_groups * n_types + 1  # x[g, t] row-major, then θ
    objective = np.zeros(n_vars)
    objective[-1] = -1.0
    a_ub = np.zeros((n_groups + n_types, n_vars))
    b_ub = np.zeros(n_groups + n_types)
    for g, profile in enumerate(profiles):
        a_ub[g, g * n_types : (g + 1) * n_types] = [-r for r in profile]
        a_ub[g, -1] = work[profile] / total
    for t, name in enumerate(types):
        a_ub[n_groups + t, t : n_groups * n_types : n_types] = 1.0
        b_ub[n_groups + t] = counts[name]
    result = linprog(objective, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    duals = -np.asarray(result.ineqlin.marginals[n_groups:], dtype=float)
    top = float(duals.max())
    if top <= 0:
        return None
    return TypePrices({name: max(float(duals[t]) / top, 0.0) for t, name in enumerate(types)})


def job_profile(
    throughputs: Sequence[tuple[str, float]],
    accepted_types: Sequence[str],
    type_speeds: dict[str, float],
) -> dict[str, float]:
    """A job's speed on each type of the cluster it accepts: measured (`Job.throughputs`),
    else the type's admin-set speed; `accepted_types` empty = every type."""
    measured = dict(throughputs)
    return {
        t: measured.get(t, speed)
        for t, speed in type_speeds.items()
        if not accepted_types or t in accepted_types
    }
