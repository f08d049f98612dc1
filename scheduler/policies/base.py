"""The shared scheduling pass: walk jobs in priority order, decide who runs, then place.

Every policy in this package is `order the jobs` + `run_pass`. The pass is the Tiresias
pass of algorithms.md §1 generalized by three knobs:

- `preemption_class`: a pending job may preempt a running job only if the running job's
  class is strictly greater (LAS/Gittins: the queue index, so jobs never preempt within a
  queue; SRTF: every running job behind it in the order). None = non-preemptive (FIFO).
- `head_of_line_blocking`: strict FIFO (YARN-CS): the first job that does not fit blocks
  every job behind it.
- `levels`: queue index per job, only for the text of hold reasons.

Capacity is tracked as counts per (device type, node) rather than device lists, so a round
over 10,000 pending jobs never loops over jobs x devices, and failed fits are memoized until
capacity grows again (it only grows when a preemption frees devices).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.types import (
    Consolidation,
    Decisions,
    Device,
    Hold,
    Job,
    JobPhase,
    PlacementKind,
    Preempt,
    QueueChange,
    Reason,
    ReasonCode,
    Snapshot,
    Start,
)
from scheduler.policies.fairness import QuotaLedger
from scheduler.policies.placement import (
    EXPLAINERS,
    FreeCounts,
    PoolChoice,
    candidate_types,
    choose_pools,
    device_type_order,
    get_placer,
    realize,
)

PreemptReason = Callable[[Job, Job], str]  # (victim, job that needs its devices) -> sentence


def default_preempt_reason(victim: Job, by: Job) -> str:
    return f"job {by.id} has higher priority and needs its devices"


def needs_text(job: Job) -> str:
    """'needs 8 x a100 on one node' (with a multiplication sign): what a job waits for.

    Names the types the job asked for ("GPU" when it accepts any), not the subset a quota
    or the cluster leaves: the user recognizes their own request.
    """
    names = "/".join(job.accepted_types) or "GPU"
    where = " on one node" if job.consolidation is Consolidation.REQUIRED else ""
    return f"needs {job.num_gpus} × {names}{where}"


def is_protected(job: Job, snapshot: Snapshot) -> bool:
    """A running job that may not be preempted (nor moved) this round.

    Non-preemptible jobs, jobs still starting (`Job.starting`: the live state machine
    preempts only RUNNING jobs, so the preemption and its claimant's start would be dropped
    at apply), and jobs inside the minimum runtime since `started_at` (Slurm's
    PreemptExemptTime, KAI's min-runtime: limits checkpoint-restart churn, algorithms.md §1).
    """
    if job.starting or not job.preemptible:
        return True
    started_at = job.started_at
    return started_at is not None and snapshot.now - started_at < snapshot.settings.min_runtime


def _add_counts(target: FreeCounts, totals: dict[str, int], counts: FreeCounts, sign: int) -> None:
    for device_type, nodes in counts.items():
        by_node = target.setdefault(device_type, {})
        for node, count in nodes.items():
            by_node[node] = by_node.get(node, 0) + sign * count
            totals[device_type] = totals.get(device_type, 0) + sign * count


def _fits_free(
    num_gpus: int,
    types: Sequence[str],
    consolidation: Consolidation,
    free: FreeCounts,
    totals: Mapping[str, int],
) -> bool:
    for device_type in types:
        if totals.get(device_type, 0) < num_gpus:
            continue
        if consolidation is not Consolidation.REQUIRED:
            return True
        if max(free[device_type].values()) >= num_gpus:
            return True
    return False


def _fits_layers(
    num_gpus: int,
    types: Sequence[str],
    consolidation: Consolidation,
    layers: Sequence[tuple[FreeCounts, Mapping[str, int]]],
) -> bool:
    """Does the job fit in the sum of several capacity layers (free + reclaimable pools)?"""
    for device_type in types:
        if sum(totals.get(device_type, 0) for _, totals in layers) < num_gpus:
            continue
        if consolidation is not Consolidation.REQUIRED:
            return True
        merged: Counter[str] = Counter()
        for counts, _ in layers:
            merged.update(counts.get(device_type, {}))
        if merged and max(merged.values()) >= num_gpus:
            return True
    return False


@dataclass(slots=True)
class _Tentative:
    index: int  # place in the priority order
    job: Job
    types: tuple[str, ...]  # types the quota allows, in the job's order of preference
    choice: PoolChoice  # where the pass put it, on counts


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


# Jobs ahead in the walk, counted per (device types they hold, queue): a held job is only
# Behind the ones on types it accepts (a job on a V100 keeps no A100 from anyone).
AheadCounts = dict[tuple[frozenset[str], int], int]


def _behind_reason(ahead: AheadCounts, types: Sequence[str], has_levels: bool) -> Reason | None:
    """'Behind: 3 jobs in queue 0, 1 job in queue 1': the running or starting jobs ahead of
    it on the device types it may use; None when there are none."""
    wanted = set(types)
    by_level: Counter[int] = Counter()
    for (held_types, level), count in ahead.items():
        if not wanted.isdisjoint(held_types):
            by_level[level] += count
    total = sum(by_level.values())
    if total == 0:
        return None
    if not has_levels:
        return Reason(ReasonCode.BEHIND, f"{_jobs(total)} ahead of it")
    parts = [f"{_jobs(count)} in queue {level}" for level, count in sorted(by_level.items())]
    return Reason(ReasonCode.BEHIND, ", ".join(parts))


def _capped_reason(job: Job, needed: int | None, max_victims: int) -> Reason:
    """The victim cap, not capacity, holds `job`: it would fit after `needed` preemptions
    (None: more than the cap, known from a job of the same shape)."""
    allowed = f"at most {max_victims} per waiting job"
    count = str(needed) if needed is not None else f"more than {max_victims}"
    count += " preemptions"
    return Reason(
        ReasonCode.WAITING_FOR_RESOURCES, f"{needs_text(job)}; would need {count}, {allowed}"
    )


def run_pass(
    snapshot: Snapshot,
    ordered: Sequence[Job],
    *,
    preemption_class: Mapping[int, int] | None = None,
    head_of_line_blocking: bool = False,
    levels: Mapping[int, int] | None = None,
    queue_changes: Sequence[QueueChange] = (),
    preempt_reason: PreemptReason = default_preempt_reason,
    max_victims: int = 0,
    starving: frozenset[int] = frozenset(),
    uncapped: frozenset[int] = frozenset(),
) -> Decisions:
    """Decide starts, preemptions and holds for `ordered` (every active job, best first).

    `max_victims` (0 = no limit) caps how many running jobs one pending job may preempt;
    a job in `starving` or `uncapped` is exempt, and one in `starving` takes the widest
    victims first (the fewest jobs
    displaced for the devices it needs).

    Steps:
    1. Build capacity: free devices per (type, node) on schedulable nodes, and for each
       preemption class the devices of unprotected running jobs of that class.
    2. Walk the order. A running job not claimed by a job ahead keeps its devices (no
       migration). A pending job, in turn:
       a. NodeDrained / TypeUnavailable if no schedulable node could ever hold it;
       b. QuotaExceeded if a quota blocks every type it accepts;
       c. takes free capacity if it fits (best fit, recorded on counts);
       d. otherwise, if preemptive, claims running jobs of a strictly greater class, lowest
          priority first (widest first when starving), keeping only the ones it needs, and
          only if they are no more than `max_victims`;
       e. otherwise it is held: WaitingForResources naming the victim cap when only
          `max_victims` stopped it; Behind when jobs ahead on types it accepts took
          capacity that existed at the start of the round; WaitingForResources when even
          that was not enough (including capacity locked by jobs inside their minimum
          runtime). When a per-type quota took some of its types away, QuotaExceeded
          instead if one of those types has room for it, else the reason names what the
          quota rules out (`_narrowed_reason`). Strict FIFO stops here: everything behind
          the first such job is held Behind it (head-of-line blocking).
       f. A victim may free more than its claimant needs (a 2-GPU victim for a 1-GPU job).
          Jobs held before the last claim get one more look at what is free, in order, so
          such a device does not sit idle while a job ranked before the victim waits.
    3. Hand the chosen pending jobs to the configured placer once, in order; a job it
       cannot place is held (WaitingForResources, or the placer's own reason). A job that
       claimed victims keeps its pass placement, on its victims' devices first, and only
       the rest go to the placer: a victim's devices go to its claimant, never to a job the
       placer prefers behind the victim. BEST_FIT uses the pass's own placement on counts
       as is (exact, see `_finish`).
    4. Clean up: a preemption whose devices no start uses is dropped (the job keeps running);
       quotas are re-checked with the device types actually placed.

    A victim keeps counting against its owner's and group's quotas in the round it is
    preempted (it holds its GPUs through the grace period, `StoppingJob`): claiming it
    frees devices for its claimant, never quota for another job of its owner.
    """
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    busy = snapshot.busy_device_ids
    running_phase = JobPhase.RUNNING
    running = [job for job in ordered if job.phase is running_phase]
    held_by: dict[int, int] = {}
    for job in running:
        for device_id in job.devices:
            held_by[device_id] = job.id

    # Step 1: capacity on counts. `capacity` = every schedulable device (used or not), for
    # "can this job ever fit"; `free` = what nobody holds.
    capacity: FreeCounts = {}
    capacity_totals: dict[str, int] = {}
    free: FreeCounts = {}
    free_totals: dict[str, int] = {}
    usable: dict[int, Device] = {}
    # For "could it fit if an admin put things back in service" (NodeDrained, never
    # TypeUnavailable): every device; those in service (drained nodes too); those on
    # schedulable nodes (cordoned GPUs too).
    whole = _Whole()
    for device in snapshot.devices:
        node_up = node_ok.get(device.node, True)
        whole.add(device, in_service=device.schedulable, node_up=node_up)
        if not (device.schedulable and node_up):
            continue  # cordoned, or on a node that takes no new jobs
        by_node = capacity.setdefault(device.device_type, {})
        by_node[device.node] = by_node.get(device.node, 0) + 1
        capacity_totals[device.device_type] = capacity_totals.get(device.device_type, 0) + 1
        free.setdefault(device.device_type, {}).setdefault(device.node, 0)
        if device.id in busy:
            continue
        usable[device.id] = device
        if device.id not in held_by:
            free[device.device_type][device.node] += 1
            free_totals[device.device_type] = free_totals.get(device.device_type, 0) + 1
    type_order = device_type_order(snapshot.devices)

    # Reclaimable capacity per preemption class, and each candidate victim's own counts.
    buckets: dict[int, tuple[FreeCounts, dict[str, int]]] = {}
    victim_counts: dict[int, FreeCounts] = {}
    victims_lowest_first: list[Job] = []
    if preemption_class is not None:
        for job in reversed(running):
            if is_protected(job, snapshot):
                continue
            counts: FreeCounts = {}
            for device_id in job.devices:
                device = usable.get(device_id)
                if device is not None:
                    by_node = counts.setdefault(device.device_type, {})
                    by_node[device.node] = by_node.get(device.node, 0) + 1
            victim_counts[job.id] = counts
            victims_lowest_first.append(job)
            bucket = buckets.setdefault(preemption_class[job.id], ({}, {}))
            _add_counts(bucket[0], bucket[1], counts, +1)
    # Starving jobs take the widest victims first; sorted() is stable, so equal widths keep
    # the lowest-priority-first order. Sorted once per pass, not per starving job.
    victims_widest_first = sorted(victims_lowest_first, key=lambda victim: -victim.num_gpus)
    initial_layers: dict[int, list[tuple[FreeCounts, dict[str, int]]]] = {}
    initial_free = ({t: dict(n) for t, n in free.items()}, dict(free_totals))
    initial_buckets = {
        c: ({t: dict(n) for t, n in b[0].items()}, dict(b[1])) for c, b in buckets.items()
    }

    ledger = QuotaLedger(snapshot, running)
    has_limits = ledger.has_limits
    claimed: dict[int, Job] = {}  # victim id -> the job that claimed it
    walked: set[int] = set()  # running jobs already passed: they keep their devices
    tentative: list[_Tentative] = []
    holds: list[tuple[int, Job, Reason]] = []  # (place in the order, job, reason)
    # Memos. Capacity only shrinks during the walk except when victims are claimed, so a
    # failure stays a failure until then: `fail_*` and `held_shape` (a whole hold decision
    # per job shape) are cleared on claims only. This is what makes a full cluster cheap:
    # once nothing fits, each further job costs a few dict lookups.
    fail_free: dict[tuple[tuple[str, ...], Consolidation], int] = {}
    fail_pool: dict[tuple[tuple[str, ...], Consolidation, int], int] = {}
    fail_capped: dict[tuple[tuple[str, ...], Consolidation, int], int] = {}  # too many victims
    layers_above: dict[int, list[tuple[FreeCounts, dict[str, int]]]] = {}
    never_fits: dict[tuple[int, tuple[str, ...], Consolidation], Reason | None] = {}
    fit_at_start: dict[tuple[int, tuple[str, ...], Consolidation, int], bool] = {}
    HeldShape = tuple[int, tuple[str, ...], Consolidation, int, bool, bool]
    held_shape: dict[HeldShape, Reason | None] = {}
    types_cache: dict[tuple[str, ...], tuple[str, ...]] = {}
    device_by_id = snapshot.device_by_id
    ahead: AheadCounts = {}
    # Behind reasons per type list for the current `ahead`; cleared whenever it grows.
    behind_cache: dict[tuple[str, ...], Reason | None] = {}
    blocker_reason: Reason | None = None
    has_levels = levels is not None
    last_claim = -1  # place in the order of the last job that claimed victims
    quota_narrowed: set[int] = set()  # held QuotaExceeded by a per-type limit alone (e.)

    for index, job in enumerate(ordered):
        job_id = job.id
        if job.phase is running_phase:
            walked.add(job_id)
            if job_id in claimed:
                continue
            counts = victim_counts.pop(job_id, None)
            if counts is not None and preemption_class is not None:
                bucket = buckets[preemption_class[job_id]]
                _add_counts(bucket[0], bucket[1], counts, -1)
            held_types = frozenset(
                device_by_id[d].device_type for d in job.devices if d in device_by_id
            )
            key_ahead = (held_types, levels[job_id] if levels is not None else 0)
            ahead[key_ahead] = ahead.get(key_ahead, 0) + 1
            behind_cache.clear()
            continue

        if blocker_reason is not None:
            holds.append((index, job, blocker_reason))
            continue

        num_gpus = job.num_gpus
        accepted = job.accepted_types
        consolidation = job.consolidation
        job_class = preemption_class[job_id] if preemption_class is not None else 0
        limited = has_limits and ledger.is_limited(job)
        # A starving job may preempt where a same-shaped job may not: its own memo entries.
        is_starving = job_id in starving
        # Exempt from the victim cap: a starving job, and one in `uncapped` (a guarantee's
        # reclaim, which still takes the lowest-priority victims first).
        exempt = is_starving or job_id in uncapped
        shape = (num_gpus, accepted, consolidation, job_class, exempt, is_starving)
        if not limited and shape in held_shape:
            # Same shape as a job already held since capacity last changed: same answer.
            reason = held_shape[shape]
            if reason is None:
                # Behind, with whatever is ahead now (it only grew since: never None).
                shape_types = types_cache[accepted]
                if shape_types not in behind_cache:
                    behind_cache[shape_types] = _behind_reason(ahead, shape_types, has_levels)
                reason = behind_cache[shape_types] or Reason(
                    ReasonCode.WAITING_FOR_RESOURCES, needs_text(job)
                )
            holds.append((index, job, reason))
            if head_of_line_blocking:
                blocker_reason = Reason(ReasonCode.BEHIND, f"job {job_id} is first in line")
            continue

        types = types_cache.get(accepted)
        if types is None:
            types = tuple(t for t in candidate_types(job, type_order) if t in capacity)
            types_cache[accepted] = types

        # a. Could it ever fit on the schedulable cluster?
        key = (num_gpus, types, consolidation)
        if key not in never_fits:
            never_fits[key] = _never_fits_reason(
                job, types, capacity, capacity_totals, whole, type_order
            )
        unavailable = never_fits[key]
        if unavailable is not None:
            holds.append((index, job, unavailable))
            continue

        # b. Quotas.
        allowed, block = ledger.allowed_types(job, types) if limited else (types, None)
        if block is not None:
            holds.append((index, job, Reason(ReasonCode.QUOTA_EXCEEDED, block)))
            continue

        # c. Free capacity.
        free_key = (allowed, consolidation)
        fits = num_gpus < fail_free.get(free_key, _NO_FAILURE) and _fits_free(
            num_gpus, allowed, consolidation, free, free_totals
        )
        if not fits:
            fail_free[free_key] = min(num_gpus, fail_free.get(free_key, _NO_FAILURE))

        # d. Reclaimable capacity from running jobs of a lower-priority class.
        capped = False  # held by the victim cap, not by capacity
        victims_needed: int | None = None
        if not fits and preemption_class is not None and buckets:
            pool_key = (allowed, consolidation, job_class)
            layers = layers_above.get(job_class)
            if layers is None:
                # The bucket objects are fixed after step 1 (claims mutate them in
                # place), so one list per class serves the whole walk.
                layers = [(free, free_totals)] + [b for c, b in buckets.items() if c > job_class]
                layers_above[job_class] = layers
            capped = not exempt and num_gpus >= fail_capped.get(pool_key, _NO_FAILURE)
            if capped:
                # A smaller job of this shape already needed too many victims; this one is
                # held by the cap too if the victims could hold it at all.
                capped = _fits_layers(num_gpus, allowed, consolidation, layers)
            elif num_gpus < fail_pool.get(pool_key, _NO_FAILURE):
                chosen: list[Job] = []
                fits_pool = len(layers) > 1 and _fits_layers(
                    num_gpus, allowed, consolidation, layers
                )
                if fits_pool:
                    chosen = _choose_victims(
                        job,
                        allowed,
                        job_class,
                        free,
                        free_totals,
                        preemption_class,
                        victims_lowest_first,
                        victim_counts,
                        claimed,
                        walked,
                        victims_widest_first if is_starving else None,
                    )
                    if max_victims and not exempt and len(chosen) > max_victims:
                        # Displacing several jobs for one is what makes fine queues churn.
                        fail_capped[pool_key] = min(
                            num_gpus, fail_capped.get(pool_key, _NO_FAILURE)
                        )
                        capped, victims_needed = True, len(chosen)
                        chosen = []
                    for victim in chosen:
                        claimed[victim.id] = job
                        counts = victim_counts.pop(victim.id)
                        bucket = buckets[preemption_class[victim.id]]
                        _add_counts(bucket[0], bucket[1], counts, -1)
                        _add_counts(free, free_totals, counts, +1)
                        # Its quota is not released: the victim holds its GPUs through
                        # its grace period (next round a `StoppingJob`), so until it
                        # exits no other job of its owner may start beside it.
                    if chosen:
                        # Capacity grew: earlier failures may fit now.
                        last_claim = index
                        fail_free.clear()
                        fail_pool.clear()
                        fail_capped.clear()
                        held_shape.clear()
                        fits = True
                else:
                    fail_pool[pool_key] = min(num_gpus, fail_pool.get(pool_key, _NO_FAILURE))

        if fits:
            choice = choose_pools(num_gpus, allowed, consolidation, free)
            if choice is not None:
                device_type, per_node = choice
                for node, count in per_node:
                    free[device_type][node] -= count
                free_totals[device_type] -= num_gpus
                ledger.charge(job, {device_type: num_gpus})
                tentative.append(_Tentative(index, job, allowed, choice))
                key_ahead = (frozenset((device_type,)), levels[job_id] if levels is not None else 0)
                ahead[key_ahead] = ahead.get(key_ahead, 0) + 1
                behind_cache.clear()
                continue

        # e. Held: by the victim cap; Behind if the start-of-round capacity would have held
        # it and jobs ahead took capacity of types it accepts; else for capacity.
        if capped:
            reason = _capped_reason(job, victims_needed, max_victims)
            if not limited:
                held_shape[shape] = reason
        else:
            start_key = (num_gpus, allowed, consolidation, job_class)
            if start_key not in fit_at_start:
                if job_class not in initial_layers:
                    initial_layers[job_class] = [initial_free] + [
                        b for c, b in initial_buckets.items() if c > job_class
                    ]
                fit_at_start[start_key] = _fits_layers(
                    num_gpus, allowed, consolidation, initial_layers[job_class]
                )
            behind: Reason | None = None
            if fit_at_start[start_key]:
                if allowed not in behind_cache:
                    behind_cache[allowed] = _behind_reason(ahead, allowed, has_levels)
                behind = behind_cache[allowed]
            if behind is not None:
                reason = behind
                if not limited:
                    held_shape[shape] = None  # Behind, with whatever `ahead` is then
            else:
                reason = Reason(ReasonCode.WAITING_FOR_RESOURCES, needs_text(job))
                if not limited and not fit_at_start[start_key]:
                    held_shape[shape] = reason
        if limited and len(allowed) != len(types):
            # A per-type quota took types away (b. only says so when it leaves none).
            removed = tuple(t for t in types if t not in allowed)
            room = layers_above.get(job_class) or [(free, free_totals)]
            reason = _narrowed_reason(reason, job, ledger.type_blocks(job, removed), room)
            if reason.code is ReasonCode.QUOTA_EXCEEDED:
                quota_narrowed.add(job_id)  # a claim may still free a type it may use (f.)
        holds.append((index, job, reason))
        if head_of_line_blocking:
            blocker_reason = Reason(ReasonCode.BEHIND, f"job {job_id} is first in line")

    # f. Claims may have freed more than their claimants took: jobs held before the last
    # claim (everything after it already saw the final free capacity) get one more look.
    if last_claim >= 0:
        kept: list[tuple[int, Job, Reason]] = []
        for entry in holds:
            index, job, reason = entry
            if index > last_claim or (
                reason.code not in _CAPACITY_HOLDS and job.id not in quota_narrowed
            ):
                kept.append(entry)
                continue
            types = types_cache.get(job.accepted_types)
            if types is None:
                types = tuple(t for t in candidate_types(job, type_order) if t in capacity)
                types_cache[job.accepted_types] = types
            allowed, block = (
                ledger.allowed_types(job, types)
                if has_limits and ledger.is_limited(job)
                else (types, None)
            )
            choice = (
                choose_pools(job.num_gpus, allowed, job.consolidation, free)
                if block is None
                else None
            )
            if choice is None:
                kept.append(entry)
                continue
            device_type, per_node = choice
            for node, count in per_node:
                free[device_type][node] -= count
            free_totals[device_type] -= job.num_gpus
            ledger.charge(job, {device_type: job.num_gpus})
            tentative.append(_Tentative(index, job, allowed, choice))
        holds = kept

    return _finish(
        snapshot,
        ordered,
        running,
        tentative,
        claimed,
        holds,
        usable,
        held_by,
        queue_changes,
        preempt_reason,
    )


def _first(item: tuple[int, Job, Reason]) -> int:
    return item[0]


def _index(entry: _Tentative) -> int:
    return entry.index


def _realize_claims(
    choices: Sequence[tuple[int, PoolChoice]],
    free: Sequence[Device],
    victim_devices: Mapping[int, set[int]],
) -> dict[int, tuple[int, ...]]:
    """`realize`, except that a job that claimed victims takes their devices first.

    The counts say how many devices of each (type, node) a job gets, not which; plain
    `realize` takes the lowest ids, so a claimant could get the free devices of a node and a
    job after it the victim's, and the victim would be preempted for a job ranked behind
    it. Claimants go first, their victims' devices first; the others take what is left,
    lowest ids first. Every choice fits on counts whatever the order: the pass deducted
    each from the same counts.
    """
    if not victim_devices:
        return realize(choices, free)
    pools: dict[str, dict[str, list[int]]] = {}
    for device in sorted(free, key=lambda d: d.id):
        pools.setdefault(device.device_type, {}).setdefault(device.node, []).append(device.id)
    placements: dict[int, tuple[int, ...]] = {}
    # sorted() is stable: claimants first, each group in the given order.
    for job_id, (device_type, per_node) in sorted(
        choices, key=lambda item: item[0] not in victim_devices
    ):
        by_node = pools.get(device_type, {})
        if any(len(by_node.get(node, ())) < count for node, count in per_node):
            continue  # a caller bug, as in `realize`: left out rather than half-placed
        own = victim_devices.get(job_id, set())
        taken: list[int] = []
        for node, count in per_node:
            ids = by_node[node]
            picked = [d for d in ids if d in own][:count]
            picked += [d for d in ids if d not in own][: count - len(picked)]
            taken.extend(picked)
            chosen = set(picked)
            by_node[node] = [d for d in ids if d not in chosen]
        placements[job_id] = tuple(sorted(taken))
    return placements


_NO_FAILURE = 1 << 62  # larger than any job's GPU count
# Holds for lack of room (not quota, type or reservation): what a freed device can end.
_CAPACITY_HOLDS = frozenset({ReasonCode.BEHIND, ReasonCode.WAITING_FOR_RESOURCES})


# Joins a capacity reason to the types a per-type quota rules out, with the limits: the
# pages cut it for people who may not see the job (dashboard.selectors.queue).
QUOTA_NARROWING = "; quota rules out "


def _narrowed_reason(
    reason: Reason,
    job: Job,
    blocks: Sequence[tuple[str, str]],
    room: Sequence[tuple[FreeCounts, Mapping[str, int]]],
) -> Reason:
    """The hold reason of a job whose per-type quota took some of its types away (`blocks`:
    each such type with the limit that rules it out, in the job's order of preference).

    If one of those types has room for it now (free, or held by jobs it may preempt:
    `room`), the quota is what holds it: QuotaExceeded naming that type's limit, as when
    the quota rules out every type. Otherwise capacity holds it too, and `reason` stands,
    with the types the quota rules out added: a user reading only "needs 1 × a100/v100"
    would wait for an a100 that can never be theirs while the quota stands.
    """
    for device_type, block in blocks:
        if _fits_layers(job.num_gpus, (device_type,), job.consolidation, room):
            return Reason(ReasonCode.QUOTA_EXCEEDED, block)
    if not blocks:
        return reason
    types = ", ".join(device_type for device_type, _ in blocks)
    limits = "; ".join(dict.fromkeys(block for _, block in blocks))
    return Reason(reason.code, f"{reason.detail}{QUOTA_NARROWING}{types} ({limits})")


Layer = tuple[FreeCounts, dict[str, int]]  # devices per type and node, and per type


def _empty_layer() -> Layer:
    return ({}, {})


@dataclass(slots=True)
class _Whole:
    """The whole cluster's devices, counted three ways, for `_never_fits_reason`."""

    every: Layer = field(default_factory=_empty_layer)
    in_service: Layer = field(default_factory=_empty_layer)  # not cordoned, any node
    on_up_nodes: Layer = field(default_factory=_empty_layer)  # schedulable nodes, cordoned too

    def add(self, device: Device, *, in_service: bool, node_up: bool) -> None:
        for layer, counted in (
            (self.every, True),
            (self.in_service, in_service),
            (self.on_up_nodes, node_up),
        ):
            if counted:
                by_node = layer[0].setdefault(device.device_type, {})
                by_node[device.node] = by_node.get(device.node, 0) + 1
                layer[1][device.device_type] = layer[1].get(device.device_type, 0) + 1


def _fits_layer(job: Job, layer: Layer, type_order: Sequence[str]) -> bool:
    """Would `job` fit on `layer` were all of it free (any type it accepts)?"""
    types = [t for t in candidate_types(job, type_order) if t in layer[0]]
    return bool(types) and _fits_free(job.num_gpus, types, job.consolidation, *layer)


_NODES_TEXT = (
    "the nodes that could hold it take no new jobs now (draining, drained, down or not answering)"
)
_CORDON_TEXT = "GPUs it needs are out of service (cordoned by an admin)"
_BOTH_TEXT = (
    "GPUs it needs are out of service (cordoned by an admin) or on nodes that take no new"
    " jobs now (draining, drained, down or not answering)"
)


def _never_fits_reason(
    job: Job,
    types: Sequence[str],
    capacity: FreeCounts,
    totals: Mapping[str, int],
    whole: _Whole,
    type_order: Sequence[str],
) -> Reason | None:
    """Why `job` cannot run on the schedulable cluster even if it were empty, or None.

    NodeDrained when it would fit if the nodes that take no new jobs, or the GPUs an admin
    cordoned, were back (an admin can act), TypeUnavailable when no device of the cluster,
    in service or not, could ever hold it (the user must change the request). The
    snapshot says only whether a node is schedulable, not why, so the text names every
    cause: draining, drained, down or silent (SUSPECT).
    """
    if types and _fits_free(job.num_gpus, types, job.consolidation, capacity, totals):
        return None
    if _fits_layer(job, whole.in_service, type_order):
        return Reason(ReasonCode.NODE_DRAINED, f"{needs_text(job)}; {_NODES_TEXT}")
    if _fits_layer(job, whole.on_up_nodes, type_order):
        return Reason(ReasonCode.NODE_DRAINED, f"{needs_text(job)}; {_CORDON_TEXT}")
    if _fits_layer(job, whole.every, type_order):
        return Reason(ReasonCode.NODE_DRAINED, f"{needs_text(job)}; {_BOTH_TEXT}")
    if not types:
        wanted = "/".join(job.accepted_types) or "GPU"
        return Reason(ReasonCode.TYPE_UNAVAILABLE, f"no schedulable {wanted} in the cluster")
    names = "/".join(types)
    if job.consolidation is Consolidation.REQUIRED:
        detail = f"no schedulable node has {job.num_gpus} × {names}"
    else:
        detail = f"the cluster has fewer than {job.num_gpus} schedulable {names}"
    return Reason(ReasonCode.TYPE_UNAVAILABLE, detail)


def _choose_victims(
    job: Job,
    types: tuple[str, ...],
    job_class: int,
    free: FreeCounts,
    free_totals: dict[str, int],
    preemption_class: Mapping[int, int],
    victims_lowest_first: Sequence[Job],
    victim_counts: Mapping[int, FreeCounts],
    claimed: Mapping[int, Job],
    walked: set[int],
    candidates_order: Sequence[Job] | None = None,
) -> list[Job]:
    """The running jobs `job` preempts: lowest priority first, then drop the unneeded.

    Steps:
    1. Add candidates (unclaimed, not yet walked, class > job_class) from the lowest
       priority up until the job fits in free + their devices. A starving job passes
       `candidates_order`: the same victims by GPUs held, most first, then lowest priority.
    2. Try removing each chosen victim, highest priority first; keep it out if the job
       still fits. The Tiresias reference preempts exactly the lowest-priority jobs; the
       second step avoids preempting a job whose devices sit on a node that cannot help
       (e.g. a `required` job needs one node).
    """
    extra: FreeCounts = {}
    extra_totals: dict[str, int] = {}
    chosen: list[Job] = []
    layers = [(free, free_totals), (extra, extra_totals)]
    for victim in candidates_order or victims_lowest_first:
        if victim.id in claimed or victim.id in walked or preemption_class[victim.id] <= job_class:
            continue
        counts = victim_counts[victim.id]
        if not any(t in counts for t in types):
            continue
        _add_counts(extra, extra_totals, counts, +1)
        chosen.append(victim)
        if _fits_layers(job.num_gpus, types, job.consolidation, layers):
            break
    for victim in reversed(list(chosen)):
        counts = victim_counts[victim.id]
        _add_counts(extra, extra_totals, counts, -1)
        if _fits_layers(job.num_gpus, types, job.consolidation, layers):
            chosen.remove(victim)
        else:
            _add_counts(extra, extra_totals, counts, +1)
    return chosen


def _finish(
    snapshot: Snapshot,
    ordered: Sequence[Job],
    running: Sequence[Job],
    tentative: Sequence[_Tentative],
    claimed: dict[int, Job],
    holds: list[tuple[int, Job, Reason]],
    usable: Mapping[int, Device],
    held_by: Mapping[int, int],
    queue_changes: Sequence[QueueChange],
    preempt_reason: PreemptReason,
) -> Decisions:
    """Steps 3 and 4 of `run_pass`: place, drop useless preemptions, re-check quotas."""
    placed: dict[int, tuple[int, ...]] = {}
    placer_reasons: dict[int, Reason] = {}
    jobs = snapshot.job_by_id
    # Each claimant's victims' devices: it takes them first (`_realize_claims`).
    victim_devices: dict[int, set[int]] = {}
    for victim_id, claimant in claimed.items():
        victim_devices.setdefault(claimant.id, set()).update(jobs[victim_id].devices)
    if tentative:
        free_devices = [
            device
            for device_id, device in usable.items()
            if device_id not in held_by or held_by[device_id] in claimed
        ]
        if snapshot.settings.placement is PlacementKind.BEST_FIT:
            # The pass already placed every job best-fit on counts, in order, each on the
            # capacity left at its turn; that assignment is exact. Re-running the placer on
            # the final free set would let early jobs take devices that preemptions freed
            # later in the walk for a specific job, and strand that job (measured: 16 of 71
            # chosen jobs in a full 10k-job round).
            placed = _realize_claims(
                [(t.job.id, t.choice) for t in tentative], free_devices, victim_devices
            )
        else:
            # Claimants keep the pass's placement, on their victims' devices: the placer
            # optimizes where jobs run, not who runs, and handing a victim's device to a
            # job ranked behind the victim would be preempting for that job (a priority
            # inversion: measured, AlloX gave a queue-6 victim's V100 to a queue-8 job and
            # held the queue-0 claimant).
            pinned = [(t.job.id, t.choice) for t in tentative if t.job.id in victim_devices]
            placed = _realize_claims(pinned, free_devices, victim_devices)
            taken = {d for ids in placed.values() for d in ids}
            rest = [
                t.job if t.types == t.job.accepted_types else replace(t.job, accepted_types=t.types)
                for t in sorted(tentative, key=_index)
                if t.job.id not in victim_devices
            ]
            left = [device for device in free_devices if device.id not in taken]
            kind = snapshot.settings.placement
            explainer = EXPLAINERS.get(kind)
            if explainer is not None:
                more, placer_reasons = explainer(rest, left, snapshot)
            else:
                more = get_placer(kind)(rest, left, snapshot)
            placed.update(more)

    # A preemption is only worth its checkpoint-restart cost if a start uses its devices.
    # Each victim is credited to its claimant when the claimant starts on its devices (it
    # always does unless a quota re-check drops it), else to the first job in priority
    # order that uses them.
    rank = {t.job.id: t.index for t in tentative}
    user_of_device: dict[int, int] = {}
    for job_id in sorted(placed, key=rank.__getitem__):
        for device_id in placed[job_id]:
            user_of_device.setdefault(device_id, job_id)
    preempted: dict[int, Job] = {}
    for victim_id, claimant in claimed.items():
        users = [user_of_device[d] for d in jobs[victim_id].devices if d in user_of_device]
        if claimant.id in users:
            preempted[victim_id] = claimant
        elif users:
            preempted[victim_id] = jobs[min(users, key=rank.__getitem__)]

    # Quotas with the types actually placed. Everything running counts, this round's
    # victims too: they checkpoint on their GPUs before letting go (as the pass counted).
    ledger = QuotaLedger(snapshot, running)
    starts: list[Start] = []
    late_holds: dict[int, Reason] = {}
    device_by_id = snapshot.device_by_id
    for entry in tentative:
        job = entry.job
        device_ids = placed.get(job.id)
        if device_ids is None:
            late_holds[job.id] = placer_reasons.get(job.id) or Reason(
                ReasonCode.WAITING_FOR_RESOURCES, needs_text(job)
            )
            continue
        type_counts: dict[str, int] = defaultdict(int)
        for device_id in device_ids:
            type_counts[device_by_id[device_id].device_type] += 1
        if ledger.has_limits:
            types = tuple(type_counts)
            allowed, block = ledger.allowed_types(job, types)
            if block is not None or len(allowed) != len(types):
                late_holds[job.id] = Reason(ReasonCode.QUOTA_EXCEEDED, block or "per-type limit")
                continue
        ledger.charge(job, type_counts)
        starts.append(Start(job.id, device_ids))

    if late_holds:
        # Starts were dropped: their victims may now be useless. Un-preempt a victim whose
        # devices no remaining start uses (quotas were checked with every victim counted,
        # so keeping one running changes no account's tally).
        used = {d for start in starts for d in start.device_ids}
        for victim_id in list(preempted):
            if not any(d in used for d in jobs[victim_id].devices):
                del preempted[victim_id]

    if late_holds:
        holds = sorted(
            [
                *holds,
                *(
                    (t.index, t.job, late_holds[t.job.id])
                    for t in tentative
                    if t.job.id in late_holds
                ),
            ],
            key=_first,
        )
    hold_list = [
        Hold(job.id, reason, place) for place, (_, job, reason) in enumerate(holds, start=1)
    ]
    preemptions = tuple(
        Preempt(job.id, preempt_reason(job, preempted[job.id]), preempted[job.id].id)
        for job in running
        if job.id in preempted
    )
    return Decisions(
        starts=tuple(starts),
        preemptions=preemptions,
        holds=tuple(hold_list),
        queue_changes=tuple(sorted(queue_changes, key=lambda change: change.job_id)),
        order=tuple(job.id for job in ordered),
    )
