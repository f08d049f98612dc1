"""Small hand-made clusters and jobs for pure scheduler tests (no Django, no fixtures)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler.core.types import (
    TIRESIAS_RULES,
    Account,
    Consolidation,
    Decisions,
    Device,
    Job,
    JobPhase,
    Node,
    PlacementKind,
    SchedulerSettings,
    Snapshot,
)


def devices(
    layout: dict[str, tuple[str, int]], speed: dict[str, float] | None = None
) -> tuple[Device, ...]:
    """{"n1": ("a100", 4), ...} -> devices numbered 0.. in node order."""
    result: list[Device] = []
    for node, (device_type, count) in layout.items():
        for _ in range(count):
            result.append(
                Device(len(result), node, device_type, (speed or {}).get(device_type, 1.0))
            )
    return tuple(result)


def pending(job_id: int, gpus: int, **fields: Any) -> Job:
    fields.setdefault("user", "alice")
    fields.setdefault("group", None)
    fields.setdefault("submit_time", float(job_id))
    fields.setdefault("queue_entered_at", fields["submit_time"])
    return Job(id=job_id, num_gpus=gpus, phase=JobPhase.PENDING, **fields)


def running(job_id: int, device_ids: Iterable[int], **fields: Any) -> Job:
    device_ids = tuple(device_ids)
    fields.setdefault("user", "alice")
    fields.setdefault("group", None)
    fields.setdefault("submit_time", float(job_id))
    fields.setdefault("queue_entered_at", fields["submit_time"])
    fields.setdefault("started_at", 0.0)
    return Job(
        id=job_id,
        num_gpus=len(device_ids),
        phase=JobPhase.RUNNING,
        devices=device_ids,
        **fields,
    )


def snapshot(
    jobs: Iterable[Job],
    devs: tuple[Device, ...],
    *,
    now: float = 10_000.0,
    policy: str = "las",
    placement: PlacementKind = PlacementKind.BEST_FIT,
    nodes: Iterable[Node] = (),
    users: Iterable[Account] = (),
    groups: Iterable[Account] = (),
    busy: Iterable[int] = (),
    finished: Iterable[float] = (),
    gpulab_defaults: bool = False,
    **settings: Any,
) -> Snapshot:
    # The policy tables test Tiresias' own mechanics (TIRESIAS_RULES) unless they ask for
    # gpulab's defaults (churn control and the starvation guard: test_churn_control.py).
    if not gpulab_defaults:
        settings = {**TIRESIAS_RULES, **settings}
    node_list = tuple(nodes) or tuple(Node(name) for name in dict.fromkeys(d.node for d in devs))
    return Snapshot(
        now=now,
        jobs=tuple(jobs),
        devices=devs,
        nodes=node_list,
        users=tuple(users),
        groups=tuple(groups),
        settings=SchedulerSettings(policy=policy, placement=placement, **settings),
        busy_device_ids=frozenset(busy),
        finished_job_sizes=tuple(finished),
    )


def started(decisions: Decisions) -> dict[int, tuple[int, ...]]:
    return {start.job_id: start.device_ids for start in decisions.starts}


def preempted(decisions: Decisions) -> dict[int, int | None]:
    return {p.job_id: p.by_job_id for p in decisions.preemptions}


def held(decisions: Decisions) -> dict[int, str]:
    return {hold.job_id: str(hold.reason) for hold in decisions.holds}


def nodes_of(snap: Snapshot, device_ids: Iterable[int]) -> set[str]:
    return {snap.device_by_id[d].node for d in device_ids}


REQUIRED = Consolidation.REQUIRED
PREFERRED = Consolidation.PREFERRED
ANY = Consolidation.ANY
