"""Scheduling policies: one uniform signature, a name -> function registry, no Django.

`decide(snapshot)` is the only entry point the live loop and the simulator call: it looks up
`snapshot.settings.policy` in `POLICIES`, runs it and checks the result against the core
invariants before anyone applies it (algorithms.md §0). One signature for every policy
avoids Gavel's name-string dispatch over differently shaped functions (style.md §2).
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core.invariants import check_decisions
from scheduler.core.types import Decisions, Snapshot
from scheduler.policies.fifo import decide_fifo, decide_fifo_backfill
from scheduler.policies.gittins import decide_gittins
from scheduler.policies.las import decide_las
from scheduler.policies.srtf import decide_srsf, decide_srtf

DecideFn = Callable[[Snapshot], Decisions]

POLICIES: dict[str, DecideFn] = {
    "fifo": decide_fifo,
    "fifo-backfill": decide_fifo_backfill,
    "las": decide_las,
    "gittins": decide_gittins,
    "srtf": decide_srtf,  # perfect knowledge: simulator only
    "srsf": decide_srsf,  # perfect knowledge: simulator only
}


class UnknownPolicy(KeyError):
    """`settings.policy` names no registered policy."""


def decide(snapshot: Snapshot) -> Decisions:
    """Run the configured policy on `snapshot` and return invariant-checked decisions.

    Steps:
    1. Look up `snapshot.settings.policy` in `POLICIES`.
    2. Run it (a pure function of the snapshot).
    3. `check_decisions` raises `InvariantViolation` on anything unsafe to apply.
    """
    name = snapshot.settings.policy
    try:
        policy = POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise UnknownPolicy(f"unknown scheduling policy {name!r}; known: {known}") from None
    decisions = policy(snapshot)
    check_decisions(snapshot, decisions)
    return decisions


# Registers PlacementKind.ALLOX in placement.PLACERS (the default placement). Imported last:
# allox imports scheduler.policies.placement, which must not need this package's names.
from scheduler.policies import allox as _allox  # noqa: E402, F401

__all__ = ["POLICIES", "DecideFn", "UnknownPolicy", "decide"]
