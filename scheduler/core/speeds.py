"""A job's measured rates on device types → the relative speeds AlloX placement reads.

Pure (no Django): the snapshot builder calls it with rates from `agents.selectors`.

Measured rates are in the job's own unit (steps/s, samples/s), so only their ratios across
types carry information. `Job.throughputs` must be in the unit the policy uses for service
(`Device.speed`, the admin-set relative speed: attained service is seconds × that speed),
so the rates are scaled by one factor k chosen to agree with the admin's speeds on the
measured types on (geometric) average:

    k = geomean over measured t of (rate_t / admin_speed_t),   speed_t = rate_t / k

A job whose rates are proportional to the admin's speeds gets exactly the admin's speeds;
one that runs 10× faster on an A100 than on a K80 where the admin set 3× keeps its 10×.
With fewer than two measured types there is no ratio: no throughputs, the admin's speeds
apply. Speeds are rounded to two decimals so that jobs of one program, measured with a
little noise, share one speed profile (the efficiency gate prices per profile).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

SPEED_DECIMALS = 2
MIN_SPEED = 10.0**-SPEED_DECIMALS


def relative_speeds(
    rates: Mapping[str, float], admin_speeds: Mapping[str, float]
) -> tuple[tuple[str, float], ...]:
    """(type, speed) pairs, sorted by type, for `Job.throughputs`; () without a ratio."""
    usable = {
        name: rate
        for name, rate in rates.items()
        if rate > 0 and math.isfinite(rate) and admin_speeds.get(name, 0.0) > 0
    }
    if len(usable) < 2:
        return ()
    log_k = sum(math.log(rate / admin_speeds[name]) for name, rate in usable.items()) / len(usable)
    scale = math.exp(log_k)
    return tuple(
        (name, max(round(rate / scale, SPEED_DECIMALS), MIN_SPEED))
        for name, rate in sorted(usable.items())
    )
