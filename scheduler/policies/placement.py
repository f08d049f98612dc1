"""Placement: given the jobs chosen to start, pick their devices.

The policies decide WHO runs (scheduler/policies/base.py); a placer decides WHERE, the way
Slurm's select plugins only pick resources while slurmctld owns the rest. Every placer has
the same signature (`Placer`) and is registered in `PLACERS` under its `PlacementKind`:

- BEST_FIT (Tiresias-style consolidation, algorithms.md §1): `required` jobs take one node,
  `preferred` jobs one node when one fits and otherwise as few nodes as possible, `any` jobs
  fill the smallest free fragments first. Single-node choices are best fit: the node left
  with the fewest free devices, so whole nodes stay free for big consolidated jobs.
- GPU_COUNT (the reference simulator's mode): node boundaries are ignored, the lowest free
  device ids of the chosen type are taken (`required` is still honoured: it is an invariant).
- ALLOX is registered by scheduler/policies/allox.py.

Rules shared by every placer here:
1. All or nothing per job: a job gets exactly `num_gpus` devices or is left out.
2. One device type per job. A synchronous gang runs at the pace of its slowest device, so
   mixing an A100 with a V100 wastes the A100; the type is the first of the job's
   `accepted_types` that fits (its order of preference). A job that accepts any type tries
   types fastest first (highest device speed, then name), see `candidate_types`.
3. Jobs are placed in the order given (priority order), each on what the previous left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from scheduler.core.types import Consolidation, Device, Job, PlacementKind, Reason, Snapshot

Placer = Callable[[Sequence[Job], Sequence[Device], Snapshot], dict[int, tuple[int, ...]]]
"""(jobs chosen to start, in priority order; devices free for them; snapshot) -> placements.

`free` holds only devices on schedulable nodes that are neither held nor busy. The result
maps job id -> device ids for every job the placer could place (all or nothing, accepted
types and consolidation honoured); jobs it cannot place are omitted.
"""

# type -> node -> free device count: the aggregate every capacity question is asked on,
# so no code path loops over jobs x devices (a 1024-GPU cluster has ~400 pools, not 1024).
FreeCounts = dict[str, dict[str, int]]
# (node, count) pairs of one device type: how many devices a job takes from each node.
PoolChoice = tuple[str, tuple[tuple[str, int], ...]]


def candidate_types(job: Job, type_order: Sequence[str]) -> tuple[str, ...]:
    """The device types `job` may use, in its order of preference.

    `type_order` lists the cluster's types fastest first; a job with no `accepted_types`
    accepts all of them in that order.
    """
    if not job.accepted_types:
        return tuple(type_order)
    return job.accepted_types


def device_type_order(devices: Iterable[Device]) -> tuple[str, ...]:
    """Device types fastest first (highest admin-set speed, ties by name): deterministic."""
    best_speed: dict[str, float] = {}
    for device in devices:
        if device.speed > best_speed.get(device.device_type, float("-inf")):
            best_speed[device.device_type] = device.speed
    return tuple(sorted(best_speed, key=lambda name: (-best_speed[name], name)))


def _best_single_node(nodes: Mapping[str, int], num_gpus: int) -> str | None:
    """The node with the fewest free devices that still holds `num_gpus` (best fit)."""
    best: str | None = None
    best_free = 0
    for node, free in nodes.items():
        if free >= num_gpus and (
            best is None or free < best_free or (free == best_free and node < best)
        ):
            best, best_free = node, free
    return best


def _spread_fewest_nodes(nodes: Mapping[str, int], num_gpus: int) -> tuple[tuple[str, int], ...]:
    """Take the largest free blocks first (fewest nodes), then best-fit the remainder."""
    chosen: list[tuple[str, int]] = []
    remaining = num_gpus
    by_size = sorted(((free, node) for node, free in nodes.items() if free > 0), key=_desc_size)
    index = 0
    while remaining > 0:
        # If some node can hold the whole remainder, use the tightest such node: the last
        # piece then does not break open a bigger block than it needs.
        tail = {node: free for free, node in by_size[index:]}
        last = _best_single_node(tail, remaining)
        if last is not None:
            chosen.append((last, remaining))
            break
        free, node = by_size[index]
        chosen.append((node, free))
        remaining -= free
        index += 1
    return tuple(chosen)


def _desc_size(item: tuple[int, str]) -> tuple[int, str]:
    return (-item[0], item[1])


def _fill_smallest_fragments(
    nodes: Mapping[str, int], num_gpus: int
) -> tuple[tuple[str, int], ...]:
    """Consume the smallest free fragments first, keeping whole nodes for consolidated jobs."""
    chosen: list[tuple[str, int]] = []
    remaining = num_gpus
    for free, node in sorted((free, node) for node, free in nodes.items() if free > 0):
        take = min(free, remaining)
        chosen.append((node, take))
        remaining -= take
        if remaining == 0:
            break
    return tuple(chosen)


def choose_pools(
    num_gpus: int,
    types: Sequence[str],
    consolidation: Consolidation,
    free: FreeCounts,
) -> PoolChoice | None:
    """Best-fit placement on counts: (device type, ((node, count), ...)) or None.

    Steps:
    1. Take the job's types in order of preference; the first type that fits wins.
    2. `required`: the best-fit single node of that type, or the next type.
    3. `preferred`: a best-fit single node if one fits; otherwise the fewest nodes.
    4. `any`: the smallest free fragments first.
    """
    for device_type in types:
        nodes = free.get(device_type)
        if not nodes:
            continue
        single = _best_single_node(nodes, num_gpus)
        if consolidation is Consolidation.REQUIRED:
            if single is not None:
                return device_type, ((single, num_gpus),)
            continue
        if sum(nodes.values()) < num_gpus:
            continue
        if consolidation is Consolidation.PREFERRED:
            if single is not None:
                return device_type, ((single, num_gpus),)
            return device_type, _spread_fewest_nodes(nodes, num_gpus)
        return device_type, _fill_smallest_fragments(nodes, num_gpus)
    return None


def _free_pools(free: Sequence[Device]) -> dict[str, dict[str, list[int]]]:
    """type -> node -> free device ids, ascending (lowest ids are taken first)."""
    pools: dict[str, dict[str, list[int]]] = {}
    for device in sorted(free, key=lambda d: d.id):
        pools.setdefault(device.device_type, {}).setdefault(device.node, []).append(device.id)
    return pools


def realize(
    choices: Sequence[tuple[int, PoolChoice]], free: Sequence[Device]
) -> dict[int, tuple[int, ...]]:
    """Turn count-level choices (job id, (type, ((node, count), ...))) into device ids.

    Choices are honoured in order, lowest free ids of each (type, node) first; a choice the
    free devices cannot honour (a caller bug) is left out rather than half-placed.
    """
    pools = _free_pools(free)
    placements: dict[int, tuple[int, ...]] = {}
    for job_id, (device_type, per_node) in choices:
        by_node = pools.get(device_type, {})
        if any(len(by_node.get(node, ())) < count for node, count in per_node):
            continue
        taken: list[int] = []
        for node, count in per_node:
            ids = by_node[node]
            taken.extend(ids[:count])
            del ids[:count]
        placements[job_id] = tuple(sorted(taken))
    return placements


def best_fit_choices(
    jobs: Sequence[Job], free: Sequence[Device], snapshot: Snapshot
) -> list[tuple[int, PoolChoice]]:
    """`choose_pools` for each job in order, each on what the previous ones left."""
    counts: FreeCounts = {}
    for device in free:
        by_node = counts.setdefault(device.device_type, {})
        by_node[device.node] = by_node.get(device.node, 0) + 1
    type_order = device_type_order(snapshot.devices)
    choices: list[tuple[int, PoolChoice]] = []
    for job in jobs:
        choice = choose_pools(
            job.num_gpus, candidate_types(job, type_order), job.consolidation, counts
        )
        if choice is None:
            continue
        device_type, per_node = choice
        for node, count in per_node:
            counts[device_type][node] -= count
        choices.append((job.id, choice))
    return choices


def best_fit_place(
    jobs: Sequence[Job], free: Sequence[Device], snapshot: Snapshot
) -> dict[int, tuple[int, ...]]:
    """Place `jobs` in order with `choose_pools` (consolidation, best fit, type preference)."""
    return realize(best_fit_choices(jobs, free, snapshot), free)


def gpu_count_place(
    jobs: Sequence[Job], free: Sequence[Device], snapshot: Snapshot
) -> dict[int, tuple[int, ...]]:
    """Reference mode: the lowest free ids of the first accepted type with enough devices.

    Node boundaries are ignored (as in the Tiresias simulator's count-only mode) except for
    `required` jobs, which take the lowest ids of the first node that holds them all:
    `required` never spans nodes is an invariant, not a placement preference.
    """
    pools = _free_pools(free)
    type_order = device_type_order(snapshot.devices)
    placements: dict[int, tuple[int, ...]] = {}
    for job in jobs:
        for device_type in candidate_types(job, type_order):
            by_node = pools.get(device_type, {})
            if job.consolidation is Consolidation.REQUIRED:
                fitting = [ids for ids in by_node.values() if len(ids) >= job.num_gpus]
                if not fitting:
                    continue
                ids = min(fitting, key=lambda node_ids: node_ids[0])
                placements[job.id] = tuple(ids[: job.num_gpus])
                del ids[: job.num_gpus]
                break
            lowest = sorted(i for ids in by_node.values() for i in ids)[: job.num_gpus]
            if len(lowest) < job.num_gpus:
                continue
            taken = set(lowest)
            for ids in by_node.values():
                ids[:] = [i for i in ids if i not in taken]
            placements[job.id] = tuple(lowest)
            break
    return placements


# ALLOX is added by scheduler/policies/allox.py when it is imported (scheduler.policies does).
PLACERS: dict[PlacementKind, Placer] = {
    PlacementKind.BEST_FIT: best_fit_place,
    PlacementKind.GPU_COUNT: gpu_count_place,
}


ExplainingPlacer = Callable[
    [Sequence[Job], Sequence[Device], Snapshot],
    tuple[dict[int, tuple[int, ...]], dict[int, Reason]],
]
"""A placer that also says why it left a job out while devices stay free for it (AlloX's
fairness knob, or a job that would rather wait for a faster type): the same placements as
its `Placer`, plus a hold reason per such job. Jobs without one lacked room."""

EXPLAINERS: dict[PlacementKind, ExplainingPlacer] = {}


def get_placer(kind: PlacementKind) -> Placer:
    """The registered placer for `kind`; BEST_FIT when `kind` is not registered.

    The default setting is ALLOX, registered by another module; falling back keeps a fresh
    checkout (or a trimmed deployment) scheduling instead of crashing every round.
    """
    return PLACERS.get(kind, PLACERS[PlacementKind.BEST_FIT])


def type_sizes(devices: Iterable[Device]) -> Callable[[Consolidation, str], int]:
    """`size(consolidation, device_type)`: the most GPUs of that type among `devices` one
    job could hold: the largest node's for a `required` job (it must fit on one node), all
    of them for the others (a job never spans device types)."""
    total: dict[str, int] = {}
    per_node: dict[tuple[str, str], int] = {}
    for device in devices:
        total[device.device_type] = total.get(device.device_type, 0) + 1
        key = (device.device_type, device.node)
        per_node[key] = per_node.get(key, 0) + 1
    largest: dict[str, int] = {}
    for (device_type, _), count in per_node.items():
        largest[device_type] = max(largest.get(device_type, 0), count)

    def size(consolidation: Consolidation, device_type: str) -> int:
        room = largest if consolidation is Consolidation.REQUIRED else total
        return room.get(device_type, 0)

    return size


def type_room(devices: Iterable[Device]) -> Callable[[Job, str], bool]:
    """`holds(job, device_type)`: whether `devices` (the schedulable ones) have room for the
    job on that type at all (`type_sizes`). A type too small for a job (8 GPUs on a lab's
    four A100s) is no place to send it."""
    size = type_sizes(devices)

    def holds(job: Job, device_type: str) -> bool:
        return size(job.consolidation, device_type) >= job.num_gpus

    return holds
