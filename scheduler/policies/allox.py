"""AlloX placement: min-cost matching of chosen jobs to interchangeable device types.

"Tiresias decides who, AlloX decides where" (algorithms.md §3). The policy pass hands this
placer the pending jobs it wants to start, in priority order, and the devices free for them;
the placer decides which device type (and which devices) each one gets, or that a job is
better off waiting for a device of a faster type than taking a slow one now.

AlloX (Le et al., EuroSys'20, `AlloXScheduler.java`; also Gavel's `policies/allox.py`)
reduces scheduling on unrelated machines to an assignment problem: jobs on one side, slots
(machine d, position k counted from the end of d's sequence) on the other, with

    cost(j, (d, k)) = D_d + k × p_{j, type(d)}

where p is j's processing time on d's type and D_d the delay until d frees. A job k-th from
last delays itself and the k − 1 after it, so the Hungarian solution minimizes the total
completion time of the window; on each machine the job at the largest k runs first, and
only those first jobs are committed (AlloX re-solves at every event).

What gpulab adds, and why:

- **Unknown durations.** p_{j,t} = expected remaining service of j / (GPUs × speed of j on t).
  The expected remaining service comes from the size distribution of recently finished jobs,
  conditional on what j has already attained: E[S − a | S > a] (Tiresias' Gittins input,
  algorithms.md §1). Under heavy-tailed sizes a job that has run long is expected to run long
  still, so it weighs more in the matching and is pulled harder towards its fast type; a job
  that is throughput-sensitive (large speed ratio between types) is pulled harder too, since
  its cost difference between types is larger. The distribution is the one 2D-Gittins
  ranks by (`gittins.size_distribution`): the lab's finished jobs once there are
  `gittins_min_samples` of them, else the shipped prior (`yarn-gput1000.csv`).
- **D: free devices in the pass, busy devices in the window step.** As the pass calls it
  today, the placer gets only the jobs it chose (one job for one free K80), so every slot is
  a free device (D = 0): a job that would rather wait for a fast device lands at position
  k ≥ 2 of a free one and is held this round, AlloX's "commit only the first job of each
  sequence". Offering busy devices there would only leave the free device idle, since no
  other job is on offer. The window step (`allox_rematch`, below) has alternatives for every
  free device, and there every device held by a running job is also a slot of its type with
  D = that job's expected remaining time / its speed: the free device goes to the job that
  loses most by waiting for another type, which is comparative advantage (Gavel's point),
  and no job crawls on a device 10× slower than one that frees soon.
- **Aggregated slots.** Identical devices are interchangeable, so slots are kept per device
  type with multiplicity: type t with C_t free devices offers positions k = 1, 1, ..., 2, ...
  (C_t copies each), n columns per type for n candidate jobs. The matrix is n × (types × n)
  (50 × 150 on a three-type cluster) whatever the cluster size.
- **Gangs.** A job needing g GPUs takes g devices of one type; it is matched to a type, then
  packed onto pools (a device type on one node) with the same best-fit / consolidation rules
  as the BEST_FIT placer (`placement.choose_pools`): one pool when consolidation requires or
  prefers it, several pools of that type when allowed. All or nothing per job.
- **Window and α.** Only the first `allox_window` candidates (priority order) enter the
  matching; AlloX's own study found 50 as good as all jobs. The fairness knob α ranks users
  with pending candidates by L = Σ over their running jobs of dominant share (GPUs held / all
  GPUs) × (speed on the held type / speed on the job's fastest type), so a job parked on its
  slow device counts for less; jobs of the ⌈α × users⌉ lowest-L users are matched first.
  algorithms.md doubles α only while nothing can be placed; gpulab goes on (the next
  window, then 2α, 4α ... users) while devices that waiting jobs fit stay free, so neither
  α nor the window leaves a device idle for a round (on an empty 1,024-GPU cluster one
  matching started 27 of 300 jobs). A job the matching queued behind a faster type stays
  waiting (`WaitingForFasterType`). Equal scores keep priority order.

**Before the pass (`efficiency_gate`).** Under a queue, a free device is worth what the
queue would make of it, not only what the first job in line would: the efficiency gate
prices device types from the backlog (`scheduler/policies/prices.py`, an LP's duals) and
narrows each waiting job to the types where it does the most per price, so a K80 goes to a
model that runs well on it and a ResNet waits for a V100 (Gavel's comparative advantage,
without its time slicing). At the end of the round, `evict_inefficient` applies the same
prices to running jobs: one that makes much less of its device than a waiting job would
gives it up; and `fill_idle_devices` lends a device no waiting job was narrowed to, until
such a job comes.

**After the pass (`allox_rematch`, called by `las` and `gittins` with ALLOX placement).**
Gavel's gain comes from choosing, among many waiting jobs, the one that suits the device
that freed, and from never leaving a job on a slow device while a fast one idles. Two
steps: `window_step` re-places the pass's starts over the starts plus the jobs held only
for lack of capacity (priority order, `allox_window` of them), keeping the pass's queue
changes and preemptions (a preemption no start uses is dropped); `migrate` moves running
jobs to types where they run faster (free devices, or swaps), only while nobody waits.
Measured on Gavel's experiment in bench/README-gavel.md.

Deterministic: ties in cost fall to the earlier job in priority order, then the faster type
(then type name); devices are taken lowest id first within the chosen pools.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import linear_sum_assignment

from scheduler.core.types import (
    Decisions,
    Device,
    Hold,
    Job,
    JobPhase,
    PlacementKind,
    Preempt,
    Reason,
    ReasonCode,
    SchedulerSettings,
    Snapshot,
    Start,
)
from scheduler.policies.placement import choose_pools, type_room
from scheduler.policies.prices import TypePrices, backlog_prices, job_profile

if TYPE_CHECKING:
    from scheduler.policies.gittins import SizeDistribution

# Relative cost perturbations that make ties deterministic without changing real choices:
# an earlier job (priority order) wins a tie, then a faster type.
_RANK_EPSILON = 1e-9
_TYPE_EPSILON = 1e-11


class RemainingService:
    """Expected remaining service E[S − a | S > a] from a job-size distribution.

    Sizes are normalized GPU-seconds (the same unit as `Job.attained_service`). Sorted sizes
    and suffix sums make each query O(log n).
    """

    def __init__(self, sizes: Sequence[float]) -> None:
        self._sizes = sorted(float(s) for s in sizes)
        suffix = [0.0] * (len(self._sizes) + 1)
        for index in range(len(self._sizes) - 1, -1, -1):
            suffix[index] = suffix[index + 1] + self._sizes[index]
        self._suffix = suffix
        median = 0.0
        if self._sizes:
            middle = len(self._sizes) // 2
            median = (
                self._sizes[middle]
                if len(self._sizes) % 2
                else 0.5 * (self._sizes[middle - 1] + self._sizes[middle])
            )
        self._median = max(median, 1.0)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> RemainingService:
        """The estimate over the distribution 2D-Gittins ranks by (algorithms.md §3: "from
        the Gittins distribution"): the lab's last `gittins_history` finished jobs once
        there are `gittins_min_samples` of them, else the shipped prior."""
        # Late import: gittins imports las, which imports this module.
        from scheduler.policies.gittins import size_distribution

        return _remaining_for(size_distribution(snapshot))

    def expected(self, attained: float) -> float:
        """Expected remaining normalized GPU-seconds of a job that has attained `attained`."""
        attained = max(0.0, attained)
        index = bisect.bisect_right(self._sizes, attained)
        above = len(self._sizes) - index
        if above == 0:
            # Longer than every job seen (or nothing seen): heavy-tailed sizes say it has
            # about as much to go as it has done (the "Lindy" estimate), never less than
            # the median.
            return max(attained, self._median)
        return self._suffix[index] / above - attained


@lru_cache(maxsize=8)
def _remaining_for(distribution: SizeDistribution) -> RemainingService:
    # Distributions are cached objects (the prior once, the learned one per history), so
    # rounds with the same history share one estimator instead of re-sorting 1,000 sizes.
    return RemainingService(distribution.sizes.tolist())


@dataclass(frozen=True, slots=True)
class _TypeClass:
    """The free devices of one type, aggregated: AlloX's interchangeable machines."""

    device_type: str
    speed: float
    capacity: int  # free devices
    largest_pool: int  # most free devices of this type on one node
    # Wall seconds until each busy device of this type frees (ascending); only filled when
    # busy devices are offered as slots (`offer_busy`).
    busy_delays: tuple[float, ...] = ()


def job_speed(job: Job, device_type: str, device_speed: float) -> float:
    """Speed of `job` on `device_type` relative to the reference: measured, else admin-set."""
    for name, value in job.throughputs:
        if name == device_type:
            return value
    return device_speed


def _accepts(job: Job, device_type: str) -> bool:
    return not job.accepted_types or device_type in job.accepted_types


def _type_speeds(devices: Sequence[Device]) -> dict[str, float]:
    """Each type's speed, fastest first (ties by name): the order must not depend on the
    order devices are listed in, since it is a job's default order of preference."""
    speeds: dict[str, float] = {}
    for device in devices:
        speeds[device.device_type] = max(speeds.get(device.device_type, 0.0), device.speed)
    return {name: speeds[name] for name in sorted(speeds, key=lambda name: (-speeds[name], name))}


def user_scores(snapshot: Snapshot) -> dict[str, float]:
    """AlloX's L per user: Σ dominant share of running jobs, normalized to the fastest type.

    A job holding g of the cluster's G GPUs has dominant share g / G (GPUs are the only
    resource gpulab schedules); it counts for share × (its speed where it runs / its speed on
    its fastest accepted type), so a job parked on its slow device weighs less (AlloX §4).
    """
    total = len(snapshot.devices)
    if total == 0:
        return {}
    speeds = _type_speeds(snapshot.devices)
    device_by_id = snapshot.device_by_id
    shares: dict[str, list[float]] = {}
    # Jobs of one model share their speeds: cache (throughputs, accepted, type) -> ratio.
    ratios: dict[tuple[tuple[tuple[str, float], ...], tuple[str, ...], str], float] = {}
    for job in snapshot.jobs:
        if job.phase is not JobPhase.RUNNING or not job.devices:
            continue
        held = device_by_id.get(job.devices[0])
        share = len(job.devices) / total
        if held is not None:
            key = (job.throughputs, job.accepted_types, held.device_type)
            ratio = ratios.get(key)
            if ratio is None:
                current = job_speed(job, held.device_type, held.speed)
                best = max(
                    (job_speed(job, t, s) for t, s in speeds.items() if _accepts(job, t)),
                    default=current,
                )
                ratio = current / best if best > 0 else 1.0
                ratios[key] = ratio
            share *= ratio
        shares.setdefault(job.user, []).append(share)
    # A job checkpointing after a preemption still holds its devices (where it runs no
    # longer matters: it counts at full share until it lets go).
    for stopping in snapshot.stopping_jobs:
        shares.setdefault(stopping.user, []).append(len(stopping.devices) / total)
    # fsum: the exact sum, whatever order the snapshot lists jobs in. A running float sum
    # rounds differently per order and turned a tie between users into an order (α then
    # admitted a different user when the snapshot listed the same jobs differently).
    return {user: math.fsum(values) for user, values in shares.items()}


def _admitted_users(
    jobs: Sequence[Job], scores: dict[str, float], alpha: float
) -> list[frozenset[str]]:
    """The user sets α, 2α, 4α, ... admit, last = everyone.

    Lowest L first; ties go to the user whose best job comes first in priority order (then
    name), so with equal scores α keeps the policy's order instead of an alphabetical one.
    """
    first: dict[str, int] = {}
    for index, job in enumerate(jobs):
        first.setdefault(job.user, index)
    users = sorted(first, key=lambda u: (scores.get(u, 0.0), first[u], u))
    if not users:
        return []
    sets: list[frozenset[str]] = []
    current = alpha if alpha > 0 else 1.0
    while True:
        count = min(len(users), max(1, math.ceil(min(current, 1.0) * len(users))))
        admitted = frozenset(users[:count])
        if not sets or admitted != sets[-1]:
            sets.append(admitted)
        if current >= 1.0:
            return sets
        current *= 2.0


def allox_place(
    jobs: Sequence[Job], free: Sequence[Device], snapshot: Snapshot
) -> dict[int, tuple[int, ...]]:
    """Place `jobs` (priority order) on `free` devices by AlloX matching.

    Steps:
    1. Aggregate free devices into type classes (capacity, largest pool) and pools; with
       `OFFER_BUSY_DEVICES`, busy devices become delayed slots of their type.
    2. Rank users by L (`user_scores`); admit the ⌈α × users⌉ lowest.
    3. Candidates: admitted users' jobs that fit some free type, first `allox_window` of them.
    4. Match candidates to (type, position) slots with the Hungarian method
       (`_match_types`); commit the first job of each device's sequence (`_commit`).
    5. While devices stay free, repeat from step 3 with the jobs not yet matched (a job
       the matching queued behind another stays out), then with α doubled, up to everyone.
    """
    return place(jobs, free, snapshot, variant=VARIANT)


@dataclass(frozen=True, slots=True)
class Variant:
    """Design choices measured on Gavel's experiment (bench/README-gavel.md).

    - `offer_busy`: offer busy devices as slots with D = their running job's expected
      remaining time (AlloX's online D term) instead of free devices only.
    - `normalize_to_best`: cost in time relative to the job's fastest type,
      p × speed_best / 1 (how much of its best speed a job loses there) instead of raw
      processing time; only changes jobs whose fastest type is not the reference.
    """

    offer_busy: bool = False
    normalize_to_best: bool = False
    remaining_from: str = "attained"  # "attained" | "queue_key" | "none" (processing_times)


# The pass's placer sees only the jobs it chose, so a delayed slot can only leave a free
# device idle: free devices only. The window step (`allox_rematch`) has alternatives for
# every free device, and there AlloX's D term is what steers each job to the type it loses
# least on (bench/README-gavel.md: 5.6 jobs/h, mean queueing 41 h free-only vs 13 h with
# busy slots, measured before preempted devices were pinned).
VARIANT = Variant()
WINDOW_VARIANT = Variant(offer_busy=True)


def place(
    jobs: Sequence[Job],
    free: Sequence[Device],
    snapshot: Snapshot,
    *,
    variant: Variant = Variant(),
    offer_busy: bool | None = None,
) -> dict[int, tuple[int, ...]]:
    """`allox_place` with its design variant explicit (see `allox_place` for the steps)."""
    return place_explained(jobs, free, snapshot, variant=variant, offer_busy=offer_busy)[0]


def allox_place_explained(
    jobs: Sequence[Job], free: Sequence[Device], snapshot: Snapshot
) -> tuple[dict[int, tuple[int, ...]], dict[int, Reason]]:
    """`allox_place`, plus why it left jobs out while devices they accept stay free."""
    return place_explained(jobs, free, snapshot, variant=VARIANT)


def place_explained(
    jobs: Sequence[Job],
    free: Sequence[Device],
    snapshot: Snapshot,
    *,
    variant: Variant = Variant(),
    offer_busy: bool | None = None,
) -> tuple[dict[int, tuple[int, ...]], dict[int, Reason]]:
    """`place`, plus a hold reason for each job it leaves out although free devices it
    accepts remain (`_explain`); jobs that simply lacked room get none."""
    if offer_busy is not None:
        variant = replace(variant, offer_busy=offer_busy)
    if not jobs or not free:
        return {}, {}
    settings = snapshot.settings
    estimator = RemainingService.from_snapshot(snapshot)
    classes, pools = _aggregate(free, snapshot, estimator if variant.offer_busy else None)
    best = _best_speeds(jobs, snapshot) if variant.normalize_to_best else None
    window = settings.allox_window if settings.allox_window > 0 else len(jobs)
    fitting = [job for job in jobs if _fits_somewhere(job, classes)]
    if not fitting:
        return {}, {}
    # L only matters when α can exclude someone.
    several = len({job.user for job in fitting}) > 1
    scores = user_scores(snapshot) if several and settings.allox_alpha < 1 else {}
    admitted_sets = _admitted_users(fitting, scores, settings.allox_alpha)
    placements: dict[int, tuple[int, ...]] = {}
    # Jobs the matching chose to keep waiting (a later position, or behind a busy device):
    # AlloX's own decision, respected for the rest of the round; value = the type it chose.
    waiting_for: dict[int, str] = {}
    # Work-conserving: α orders users and the window bounds one matching, but neither may
    # leave devices idle that waiting jobs fit (on an empty cluster one window-sized matching
    # of α's users started 27 of 300 jobs on 1,024 GPUs). So the matching repeats over the
    # next window, then the next α set, on what is still free, until nothing more starts.
    for admitted in admitted_sets:
        while True:
            candidates: list[Job] = []
            for job in fitting:
                if len(candidates) == window:
                    break
                if (
                    job.user in admitted
                    and job.id not in placements
                    and job.id not in waiting_for
                    and _fits_somewhere(job, classes)
                ):
                    candidates.append(job)
            if not candidates:
                break
            assignment = _match_types(candidates, classes, estimator, best, variant.remaining_from)
            started = _commit(candidates, assignment, classes, pools)
            # Positions count from the end of a device's sequence: a class matched to more
            # jobs than it has free devices (a position above 1 used) queues the rest
            # behind them on purpose. A job left out of a class that used only first
            # positions lacked room only because gangs took more devices than jobs: it is
            # offered again against what is left.
            sequenced = {slot[0] for slot in assignment if slot[0] >= 0 and slot[1] > 1}
            for job, (cls_index, _, _, waits) in zip(candidates, assignment, strict=True):
                if job.id not in started and (waits or cls_index in sequenced):
                    waiting_for[job.id] = classes[cls_index].device_type
            placements.update(started)
            classes = _left_after(classes, pools)
            if not started:
                break
        if not any(cls.capacity for cls in classes):
            break
    return placements, _explain(fitting, waiting_for, classes, placements)


def _left_after(
    classes: Sequence[_TypeClass], pools: dict[str, dict[str, list[int]]]
) -> list[_TypeClass]:
    """`classes` with capacity and largest pool recomputed from what `pools` still holds."""
    left: list[_TypeClass] = []
    for cls in classes:
        sizes = [len(ids) for ids in pools.get(cls.device_type, {}).values()]
        left.append(replace(cls, capacity=sum(sizes), largest_pool=max(sizes, default=0)))
    return left


def _explain(
    fitting: Sequence[Job],
    waiting_for: dict[int, str],
    left: Sequence[_TypeClass],
    placements: dict[int, tuple[int, ...]],
) -> dict[int, Reason]:
    """Why a job AlloX left out waits although devices it accepts stay free.

    `left` is what the matchings left free. A job it could start on them was matched to a
    later slot of a faster type (WaitingForFasterType: AlloX expects it to finish sooner
    there). Jobs that fit nowhere now get no reason: they lacked room, and the caller says so.
    """
    reasons: dict[int, Reason] = {}
    for job in fitting:
        matched = waiting_for.get(job.id)
        if job.id in placements or matched is None:
            continue
        open_types = [cls.device_type for cls in left if _fits(job, cls)]
        if not open_types or matched in open_types:
            continue  # no room left, or not a preference for another type
        reasons[job.id] = Reason(
            ReasonCode.WAITING_FOR_FASTER_TYPE,
            f"expected to finish sooner on a {matched} than on a free {open_types[0]}",
        )
    return reasons


def _aggregate(
    free: Sequence[Device],
    snapshot: Snapshot,
    estimator: RemainingService | None,
) -> tuple[list[_TypeClass], dict[str, dict[str, list[int]]]]:
    """Free devices -> type classes (fastest first, then name) and type -> node -> ids.

    With an `estimator`, every device held by a running job (and not free) adds a delayed
    slot to its type: D = the job's expected remaining service / (its GPUs × its speed on
    that type), AlloX's "delay until d frees".
    """
    pools: dict[str, dict[str, list[int]]] = {}
    speeds: dict[str, float] = {}
    for device in sorted(free, key=lambda d: d.id):
        pools.setdefault(device.device_type, {}).setdefault(device.node, []).append(device.id)
        speeds[device.device_type] = max(speeds.get(device.device_type, 0.0), device.speed)
    delays: dict[str, list[float]] = {}
    if estimator is not None:
        free_ids = {device.id for device in free}
        device_by_id = snapshot.device_by_id
        node_ok = {node.name: node.schedulable for node in snapshot.nodes}
        for job in snapshot.jobs:
            if not job.is_running or not job.devices:
                continue
            held = [device_by_id[d] for d in job.devices if d in device_by_id and d not in free_ids]
            if not held:
                continue
            rate = len(job.devices) * job_speed(job, held[0].device_type, held[0].speed)
            delay = estimator.expected(job.attained_service) / max(rate, 1e-9)
            for device in held:
                if not (device.schedulable and node_ok.get(device.node, True)):
                    continue  # freed, it takes no job: cordoned, or on a node taking none
                delays.setdefault(device.device_type, []).append(delay)
                speeds[device.device_type] = max(speeds.get(device.device_type, 0.0), device.speed)
    classes = [
        _TypeClass(
            device_type=t,
            speed=speeds[t],
            capacity=sum(len(ids) for ids in pools.get(t, {}).values()),
            largest_pool=max((len(ids) for ids in pools.get(t, {}).values()), default=0),
            busy_delays=tuple(sorted(delays.get(t, ()))),
        )
        for t in speeds
    ]
    classes.sort(key=lambda c: (-c.speed, c.device_type))
    return classes, pools


def _best_speeds(jobs: Sequence[Job], snapshot: Snapshot) -> dict[int, float]:
    """Each job's speed on its fastest accepted type present in the cluster."""
    speeds = _type_speeds(snapshot.devices)
    return {
        job.id: max(
            (job_speed(job, t, s) for t, s in speeds.items() if _accepts(job, t)), default=1.0
        )
        or 1.0
        for job in jobs
    }


def _fits(job: Job, cls: _TypeClass) -> bool:
    """Can `job` start on the free devices of `cls` now?"""
    if cls.capacity < job.num_gpus or not _runs_on(job, cls):
        return False
    if job.consolidation == "required":
        return cls.largest_pool >= job.num_gpus
    return True


def _runs_on(job: Job, cls: _TypeClass) -> bool:
    return _accepts(job, cls.device_type) and job_speed(job, cls.device_type, cls.speed) > 0


def _fits_somewhere(job: Job, classes: Sequence[_TypeClass]) -> bool:
    return any(_fits(job, cls) for cls in classes)


def processing_times(
    jobs: Sequence[Job],
    classes: Sequence[_TypeClass],
    estimator: RemainingService,
    remaining_from: str = "attained",
) -> np.ndarray:
    """p[j, c]: expected remaining wall seconds of job j on class c (inf where it cannot run).

    `remaining_from` picks what the size estimate is conditioned on (a `Variant` knob):
    "attained" (whole-life service, the spec), "queue_key" (service since the last promotion,
    so a job promoted for starvation competes as a fresh one), "none" (the same estimate for
    every job: the matching then weighs only speeds, ties by priority).
    """
    p = np.full((len(jobs), len(classes)), np.inf)
    for row, job in enumerate(jobs):
        if remaining_from == "none":
            remaining = estimator.expected(0.0)
        elif remaining_from == "queue_key":
            remaining = estimator.expected(job.service_since_promotion)
        else:
            remaining = estimator.expected(job.attained_service)
        for col, cls in enumerate(classes):
            if _runs_on(job, cls):
                speed = job_speed(job, cls.device_type, cls.speed)
                p[row, col] = remaining / (max(job.num_gpus, 1) * speed)
    return p


# One matched slot: (class index, position k, p of the job there, waits for a busy device).
_Slot = tuple[int, int, float, bool]


def _match_types(
    jobs: Sequence[Job],
    classes: Sequence[_TypeClass],
    estimator: RemainingService,
    best: dict[int, float] | None = None,
    remaining_from: str = "attained",
) -> list[_Slot]:
    """Hungarian assignment of jobs to (type, position) slots.

    Columns, per class c with C free devices and n candidate jobs:
    - free slots: n columns at positions ⌊i / C⌋ + 1 (C copies of k = 1, then of k = 2, ...),
      all an n-job matching can use; cost k × p (D = 0);
    - busy slots (if offered): the n soonest-freeing busy devices, position 1 behind their
      running job, cost D + p; single-GPU jobs only (a gang waiting for several busy devices
      is not one AlloX slot).
    Every class a job fits offers n free columns, so the problem is always feasible.
    """
    n = len(jobs)
    if n == 0:
        return []
    p = processing_times(jobs, classes, estimator, remaining_from)
    if best is not None:
        p = p * np.array([best.get(job.id, 1.0) for job in jobs])[:, None]
    rank = 1.0 + _RANK_EPSILON * np.arange(n)[:, None]
    fits = np.array([[_fits(job, cls) for cls in classes] for job in jobs], dtype=bool)
    single = np.array([job.num_gpus == 1 for job in jobs], dtype=bool)
    blocks: list[np.ndarray] = []
    meta: list[tuple[int, int, bool]] = []
    for index, cls in enumerate(classes):
        tie = 1.0 + _TYPE_EPSILON * index
        column_p = np.where(fits[:, index], p[:, index], np.inf)[:, None]
        if cls.capacity > 0:
            level = np.arange(n) // cls.capacity + 1.0
            blocks.append(column_p * level[None, :] * rank * tie)
            meta.extend((index, int(k), False) for k in level)
        delays = np.asarray(cls.busy_delays[:n])
        if delays.size:
            wait_p = np.where(single & np.isfinite(p[:, index]), p[:, index], np.inf)[:, None]
            blocks.append((delays[None, :] + wait_p) * rank * tie)
            meta.extend((index, 1, True) for _ in range(delays.size))
    cost = np.hstack(blocks)
    rows, cols = linear_sum_assignment(cost)
    result: list[_Slot] = [(-1, 0, math.inf, False)] * n
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        cls_index, level, waits = meta[col]
        if math.isfinite(cost[row, col]):
            result[row] = (cls_index, level, float(p[row, cls_index]), waits)
    return result


def _commit(
    jobs: Sequence[Job],
    assignment: Sequence[_Slot],
    classes: Sequence[_TypeClass],
    pools: dict[str, dict[str, list[int]]],
) -> dict[int, tuple[int, ...]]:
    """Start the first job of each free device's sequence, packing gangs onto pools.

    Per class, the jobs matched to its free slots run in AlloX order: largest position k
    first (earliest in its device's sequence), then shortest p (Smith's rule), then priority.
    Jobs are packed in that order while devices remain; a job that does not fit waits, and so
    does a job matched behind a busy device.
    """
    by_class: dict[int, list[tuple[int, float, int, Job]]] = {}
    for rank, (job, slot) in enumerate(zip(jobs, assignment, strict=True)):
        cls_index, level, p, waits = slot
        if cls_index < 0 or waits or not math.isfinite(p):
            continue
        by_class.setdefault(cls_index, []).append((-level, p, rank, job))
    placements: dict[int, tuple[int, ...]] = {}
    for cls_index in sorted(by_class):
        device_type = classes[cls_index].device_type
        nodes = pools[device_type]
        counts = {device_type: {node: len(ids) for node, ids in nodes.items() if ids}}
        left = classes[cls_index].capacity
        for _, _, _, job in sorted(by_class[cls_index], key=lambda item: item[:3]):
            if left <= 0:
                break
            if job.num_gpus > left:
                continue
            choice = choose_pools(job.num_gpus, (device_type,), job.consolidation, counts)
            if choice is None:
                continue
            left -= job.num_gpus
            placements[job.id] = _take(nodes, counts[device_type], choice[1])
    return placements


def _take(
    nodes: dict[str, list[int]],
    counts: dict[str, int],
    choice: Sequence[tuple[str, int]],
) -> tuple[int, ...]:
    """Take the devices `choice` ((node, count), ...) names from one type's free `nodes`
    (lowest ids first) and keep that type's `counts` (node -> free) in step."""
    taken: list[int] = []
    for node, count in choice:
        ids = nodes[node]
        taken.extend(ids[:count])
        del ids[:count]
        counts[node] -= count
        if counts[node] == 0:
            del counts[node]
    return tuple(sorted(taken))


# --------------------------------------------------------------------------- window step
# The policy pass hands the placer only the jobs that fit the free devices in priority
# order (one job for one free K80), so AlloX can only permute types among them. AlloX's
# gain comes from choosing, among a window of waiting jobs, the one that loses least on the
# device that freed. `allox_rematch` is that step written against the pass's output, so it
# can be measured now and folded into the pass (run_pass step 3) later.

# (b) below: a pass start whose job has waited this many first-queue thresholds (seconds)
# keeps the pass's placement. None = off. 1 threshold (1 h) pinned nearly every start under
# load and erased AlloX's gain (bench/README-gavel.md), so it is off by default.
PATIENCE_THRESHOLDS: float | None = None

# Ablation switch (bench/gavel.py): False = AlloX only places the pass's own starts.
WINDOW_STEP = True

# Jobs held waiting for devices: for room, or by AlloX's own choice while devices are free
# (α, or a faster type). The window step, eviction and lending consider all of them.
_CAPACITY_CODES = frozenset(
    {
        ReasonCode.BEHIND,
        ReasonCode.WAITING_FOR_RESOURCES,
        ReasonCode.WAITING_FOR_FASTER_TYPE,
    }
)


def allox_rematch(
    snapshot: Snapshot, decisions: Decisions, *, keep: frozenset[int] = frozenset()
) -> Decisions:
    """The AlloX steps after the pass: the window step, then moves (`migrate`).

    What `las` and `gittins` run after `run_pass` when placement is ALLOX. The starts of
    the jobs in `keep` (inside their group's guarantee) keep the pass's placement.
    """
    if snapshot.settings.placement is not PlacementKind.ALLOX:
        return decisions
    if WINDOW_STEP:
        decisions = window_step(snapshot, decisions, keep=keep)
    if MIGRATION:
        decisions = migrate(snapshot, decisions)
    return decisions


def window_step(
    snapshot: Snapshot, decisions: Decisions, *, keep: frozenset[int] = frozenset()
) -> Decisions:
    """Re-place a pass's starts over a window of jobs held only for lack of capacity.

    Steps:
    1. Free devices = schedulable, not busy, not held by a job that keeps running.
    2. Candidates = the pass's starts plus held jobs whose reason is Behind or
       WaitingForResources, in the pass's order, up to `allox_window` of them (every start
       is kept as a candidate). Quota-blocked types are removed per job as the pass does.
    3. `allox_place` picks who of them goes where; placements are re-checked against quotas
       in priority order.
    4. A preemption whose victim's devices no start uses is dropped (the victim keeps
       running); a start the pass chose that AlloX leaves waiting becomes a hold.
    """
    held_ids = {h.job_id for h in decisions.holds if h.reason.code in _CAPACITY_CODES}
    if not held_ids:
        return decisions
    jobs = snapshot.job_by_id
    preempted = {p.job_id for p in decisions.preemptions}
    # Pinned starts keep the pass's placement: (a) a start on a preempted job's devices,
    # because a preemption is the pass's priority decision and handing those devices to
    # another waiting job would let jobs of one queue preempt each other (measured: 30x
    # preemption churn); (b) a start whose job has waited `patience` already, so AlloX's
    # preference for short or well-suited jobs cannot starve it (its starvation tail).
    victim_devices = {d for job_id in preempted for d in jobs[job_id].devices}
    patience = (
        PATIENCE_THRESHOLDS * snapshot.settings.queue_thresholds[0]
        if PATIENCE_THRESHOLDS is not None and snapshot.settings.queue_thresholds
        else math.inf
    )
    # (c) a start inside its group's guarantee (`keep`): AlloX may not hand it to others.
    pinned = [
        start
        for start in decisions.starts
        if victim_devices.intersection(start.device_ids)
        or jobs[start.job_id].waiting_since_promotion >= patience
        or start.job_id in keep
    ]
    pinned_devices = {d for start in pinned for d in start.device_ids}
    pinned_ids = {start.job_id for start in pinned}
    started = {start.job_id for start in decisions.starts} - pinned_ids
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    held_devices = {
        d
        for job in snapshot.jobs
        if job.is_running and job.id not in preempted
        for d in job.devices
    }
    free = [
        d
        for d in snapshot.devices
        if d.schedulable
        and node_ok.get(d.node, True)
        and d.id not in snapshot.busy_device_ids
        and d.id not in held_devices
        and d.id not in victim_devices
        and d.id not in pinned_devices
    ]
    if not free:
        return decisions

    from scheduler.policies.fairness import QuotaLedger  # policy-layer helper, late import

    # This round's victims count against their owners' quotas: they still hold their GPUs
    # through the grace period (as `run_pass` counts them).
    ledger = QuotaLedger(snapshot, [job for job in snapshot.jobs if job.is_running])
    device_by_id = snapshot.device_by_id
    for start in pinned:
        pinned_counts: dict[str, int] = {}
        for device_id in start.device_ids:
            t = device_by_id[device_id].device_type
            pinned_counts[t] = pinned_counts.get(t, 0) + 1
        ledger.charge(jobs[start.job_id], pinned_counts)
    all_types = tuple(sorted({d.device_type for d in snapshot.devices}))
    window = snapshot.settings.allox_window if snapshot.settings.allox_window > 0 else 1 << 30
    extra_room = max(window - len(started), 0)
    free_types = {d.device_type for d in free}
    candidates: list[Job] = []
    for job_id in decisions.order:
        if job_id in pinned_ids:
            continue
        job = jobs[job_id]
        if job_id not in started:
            if job_id not in held_ids or extra_room == 0:
                continue
            if job.accepted_types and not free_types.intersection(job.accepted_types):
                continue  # nothing free it can take: it does not use up the window
            extra_room -= 1
        if ledger.has_limits and ledger.is_limited(job):
            allowed, block = ledger.allowed_types(job, job.accepted_types or all_types)
            if block is not None:
                continue
            if allowed != job.accepted_types:
                job = replace(job, accepted_types=allowed)
        candidates.append(job)

    placed, why = place_explained(candidates, free, snapshot, variant=WINDOW_VARIANT)
    starts: list[Start] = list(pinned)
    for job in candidates:
        device_ids = placed.get(job.id)
        if device_ids is None:
            continue
        type_counts: dict[str, int] = {}
        for device_id in device_ids:
            t = device_by_id[device_id].device_type
            type_counts[t] = type_counts.get(t, 0) + 1
        if ledger.has_limits and ledger.is_limited(job):
            allowed, block = ledger.allowed_types(job, tuple(type_counts))
            if block is not None or len(allowed) != len(type_counts):
                continue
        ledger.charge(job, type_counts)
        starts.append(Start(job.id, device_ids))

    used = {d for start in starts for d in start.device_ids}
    preemptions = tuple(
        p for p in decisions.preemptions if any(d in used for d in jobs[p.job_id].devices)
    )
    now_started = {start.job_id for start in starts}
    reasons = {h.job_id: h.reason for h in decisions.holds if h.job_id not in now_started}
    for job_id in {start.job_id for start in decisions.starts} - now_started:
        reasons[job_id] = Reason(
            ReasonCode.WAITING_FOR_RESOURCES, "AlloX: another job loses less on the free devices"
        )
    # A candidate AlloX left out while devices it accepts stay free says why (α, or a
    # faster type it expects to finish sooner on), not that it lacks room.
    for job_id, reason in why.items():
        if job_id in reasons:
            reasons[job_id] = reason
    holds: list[Hold] = []
    for job_id in decisions.order:
        reason = reasons.get(job_id)
        if reason is not None:
            holds.append(Hold(job_id, reason, len(holds) + 1))
    return replace(decisions, starts=tuple(starts), preemptions=preemptions, holds=tuple(holds))


# --------------------------------------------------------------------------- efficiency gate
# Under a queue a device given to one job is a device no other job gets, so what matters is
# not only how fast a job runs on a type but how much the others would make of it: a
# Recommendation model runs 1.4x as fast on a K80 as on a V100, a ResNet-50 0.14x. Gavel
# re-solves an allocation LP every round and time-slices along it; gpulab commits a job to a
# type for its run, so before the pass it narrows each waiting job to the types where it is
# efficient at the backlog's prices (`prices.backlog_prices`). Measured on Gavel's cell at
# 5.6 jobs/h (bench/README-gavel.md).

# Jobs with the same throughputs and accepted types share a speed profile, hence a verdict.
_JobKind = tuple[tuple[tuple[str, float], ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Gate:
    """What the efficiency gate made of a snapshot (`efficiency_gate`)."""

    snapshot: Snapshot  # waiting jobs narrowed to their efficient types (or the input)
    prices: TypePrices | None = None  # None: the gate is not active this round
    type_speeds: dict[str, float] = field(default_factory=dict)  # schedulable types' speeds


def efficiency_gate(snapshot: Snapshot, *, exempt: frozenset[int] = frozenset()) -> Gate:
    """Narrow each waiting job's accepted types by the efficiency gate.

    Steps:
    1. Only with AlloX placement, the gate on (`allox_efficiency_gate` > 0), and a queue:
       waiting jobs ask for more devices than are free (without one every job starts
       anyway, and narrowing would only leave devices idle).
    2. Prices from every job still to serve, waiting or running, each weighted by its
       expected remaining work (`backlog_prices`); none with a single device type.
    3. Each waiting job keeps the types it accepts where its efficiency is at least
       `allox_efficiency_gate` (never none: its most efficient type always qualifies);
       one in `exempt` keeps them all.

    Jobs are grouped by (throughputs, accepted types), so a 10,000-job queue of a few models
    costs a few profile computations and one small LP.
    """
    gate = snapshot.settings.allox_efficiency_gate
    if gate <= 0 or snapshot.settings.placement is not PlacementKind.ALLOX:
        return Gate(snapshot)
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    schedulable = [d for d in snapshot.devices if d.schedulable and node_ok.get(d.node, True)]
    held = {d for job in snapshot.jobs if job.is_running for d in job.devices}
    free = sum(1 for d in schedulable if d.id not in held and d.id not in snapshot.busy_device_ids)
    wanted = sum(job.num_gpus for job in snapshot.jobs if not job.is_running)
    if wanted <= free:
        return Gate(snapshot)
    type_speeds = _type_speeds(schedulable)
    estimator = RemainingService.from_snapshot(snapshot)
    parts: dict[_JobKind, list[float]] = {}
    for job in snapshot.jobs:
        kind = (job.throughputs, job.accepted_types)
        parts.setdefault(kind, []).append(estimator.expected(job.attained_service) * job.num_gpus)
    # Exact sums in sorted kind order: the LP (hence every verdict) must not depend on the
    # order the snapshot lists jobs in.
    work = {kind: math.fsum(parts[kind]) for kind in sorted(parts)}
    profiles = {kind: job_profile(kind[0], kind[1], type_speeds) for kind in work}
    prices = backlog_prices(((profiles[kind], w) for kind, w in work.items()), schedulable)
    if prices is None:
        return Gate(snapshot)
    narrowed: dict[_JobKind, tuple[str, ...] | None] = {}
    for kind, profile in profiles.items():
        eligible = prices.eligible(profile, gate)
        if eligible and set(eligible) != set(profile):
            order = kind[1] or tuple(type_speeds)  # keep the job's own order of preference
            narrowed[kind] = tuple(t for t in order if t in eligible)
        else:
            narrowed[kind] = None
    if not any(narrowed.values()):
        return Gate(snapshot, prices, type_speeds)
    # A type too small for the job (8 GPUs on a lab's four A100s) is no place to send it:
    # narrowed to it alone, the job would wait for good ("fewer than 8 schedulable a100").
    holds = type_room(schedulable)

    jobs: list[Job] = []
    for job in snapshot.jobs:
        # `exempt`: waiting jobs inside their group's guarantee keep every type they accept.
        if job.is_running or job.id in exempt:
            jobs.append(job)
            continue
        types = narrowed[(job.throughputs, job.accepted_types)]
        if types is not None:
            types = tuple(t for t in types if holds(job, t))
        jobs.append(replace(job, accepted_types=types) if types else job)
    return Gate(replace(snapshot, jobs=tuple(jobs)), prices, type_speeds)


def free_after(snapshot: Snapshot, decisions: Decisions) -> list[Device]:
    """Devices nobody holds after `decisions`: on schedulable nodes, not busy, held by no
    running job (a preempted one's devices are spoken for until its checkpoint is taken)
    and given to no start."""
    taken = {d for job in snapshot.jobs if job.is_running for d in job.devices}
    taken |= {d for start in decisions.starts for d in start.device_ids}
    taken |= snapshot.busy_device_ids
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    return [
        d
        for d in snapshot.devices
        if d.id not in taken and d.schedulable and node_ok.get(d.node, True)
    ]


def _efficiency_lookup(gate: Gate) -> Callable[[Job], dict[str, float]]:
    """job -> its efficiency on each type at the gate's prices, computed once per job kind."""
    prices = gate.prices
    assert prices is not None
    cache: dict[_JobKind, dict[str, float]] = {}

    def efficiency(job: Job) -> dict[str, float]:
        kind = (job.throughputs, job.accepted_types)
        found = cache.get(kind)
        if found is None:
            profile = job_profile(job.throughputs, job.accepted_types, gate.type_speeds)
            found = cache[kind] = prices.efficiency(profile)
        return found

    return efficiency


def _started_instead_of_held(
    decisions: Decisions, starts: list[Start], preemptions: Sequence[Preempt], ids: set[int]
) -> Decisions:
    """`decisions` with `starts` and `preemptions`, and jobs `ids` no longer held."""
    kept = [h for h in decisions.holds if h.job_id not in ids]
    holds = tuple(replace(h, position=place) for place, h in enumerate(kept, 1))
    return replace(decisions, starts=tuple(starts), preemptions=tuple(preemptions), holds=holds)


# Under a queue, a running job whose efficiency on its device's type is below this fraction
# of the gate gives the device up to a waiting job the gate sends there. Measured on Gavel's
# cell at 5.6 jobs/h with gate 1 (bench/experiments/gavel_variants/README.md): average JCT
# 21.3 h without eviction, 21.1 h at 0.5, 20.7 h at 0.8, 20.4 h at 0.95, 20.7 h at 0.999
# (a job then loses its device over estimate noise); measured before lending.
EVICTION_FRACTION = 0.95
EVICTION = True  # ablation switch (bench/experiments/gavel_variants)


def evict_inefficient(
    gate: Gate, decisions: Decisions, preemption_class: Mapping[int, int]
) -> Decisions:
    """Under a queue, hand devices used well below their worth to waiting jobs that suit them.

    A job started on a type while nobody waited, or before the backlog's prices moved, can
    hold a device it makes little of: a ResNet-50 on a K80 at 0.14x while Recommendation
    jobs, which run faster there than on a V100, wait for K80s. `migrate` cannot help (it
    moves jobs only while nobody waits), and LAS's preemption only looks at attained
    service. Measured on Gavel's cell at 5.6 jobs/h: 2.4 devices' worth of value lost to
    such placements under a queue, and 0.8 K80s idle.

    Steps:
    1. Only when the gate is active this round (`efficiency_gate` priced the backlog).
    2. Victims: running single-GPU jobs past their minimum runtime, not preempted this
       round, without quota limits, whose efficiency on their device's type is below
       `EVICTION_FRACTION` x the gate.
    3. In priority order, each single-GPU job held for capacity (without quota limits)
       takes the least efficient victim (then the lowest in priority) on a type it was
       narrowed to, among those it may preempt under the pass's own rule
       (`preemption_class`: the victim's class strictly greater, so across queues only,
       after the waiting job's patience and with the queue margin); the victim is
       preempted for it and waits, narrowed like every waiting job, for a type where it is
       efficient. Without that rule a job deep in the last queue evicted a fresh queue-0
       job (algorithms.md: AlloX never preempts, Tiresias only across queues).
    Multi-GPU jobs neither evict nor are evicted (a gang would need several victims at
    once on suitable nodes); the pass's own preemption serves them.
    """
    prices = gate.prices
    if prices is None or not EVICTION:
        return decisions
    held = [h.job_id for h in decisions.holds if h.reason.code in _CAPACITY_CODES]
    if not held:
        return decisions
    from scheduler.policies.base import is_protected  # policy-layer helper, late import
    from scheduler.policies.fairness import QuotaLedger

    snapshot = gate.snapshot
    preempted = {p.job_id for p in decisions.preemptions}
    used = {d for start in decisions.starts for d in start.device_ids}
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    device_by_id = snapshot.device_by_id
    ledger = QuotaLedger(snapshot, [job for job in snapshot.jobs if job.is_running])
    position = {job_id: index for index, job_id in enumerate(decisions.order)}
    threshold = EVICTION_FRACTION * snapshot.settings.allox_efficiency_gate
    efficiency_of = _efficiency_lookup(gate)
    victims: dict[str, list[tuple[float, int, Job, int]]] = {}
    for job in snapshot.jobs:
        if not job.is_running or job.num_gpus != 1 or job.id in preempted or not job.devices:
            continue
        device = device_by_id.get(job.devices[0])
        if (
            device is None
            or device.id in used
            or device.id in snapshot.busy_device_ids
            or not (device.schedulable and node_ok.get(device.node, True))
            or is_protected(job, snapshot)
            or (ledger.has_limits and ledger.is_limited(job))
        ):
            continue
        efficiency = efficiency_of(job).get(device.device_type, 1.0)
        if efficiency < threshold:
            victims.setdefault(device.device_type, []).append(
                (efficiency, -position.get(job.id, 0), job, device.id)
            )
    if not victims:
        return decisions
    for pool in victims.values():
        pool.sort(key=lambda item: item[:2])
    jobs = snapshot.job_by_id
    starts = list(decisions.starts)
    preemptions = list(decisions.preemptions)
    evicted_for: set[int] = set()
    for job_id in held:
        job = jobs[job_id]
        if job.num_gpus != 1 or (ledger.has_limits and ledger.is_limited(job)):
            continue
        types = job.accepted_types or tuple(victims)
        job_class = preemption_class.get(job_id, _NEVER)
        best: tuple[float, int, Job, int] | None = None
        best_at = 0
        for t in types:
            for at, item in enumerate(victims.get(t, ())):
                # Pools are sorted, so the first victim this job may preempt is its best.
                if preemption_class.get(item[2].id, -1) > job_class:
                    if best is None or item[:2] < best[:2]:
                        best, best_at = item, at
                    break
        if best is None:
            continue
        efficiency, _, victim, device_id = best
        device_type = device_by_id[device_id].device_type
        victims[device_type].pop(best_at)
        preemptions.append(
            Preempt(
                victim.id,
                f"job {job_id} makes more of this {device_type} for the queue: this job "
                f"does {efficiency:.0%} there of what it does on its most efficient type "
                "(efficiency gate)",
                job_id,
            )
        )
        starts.append(Start(job_id, (device_id,)))
        evicted_for.add(job_id)
        if not any(victims.values()):
            break
    if not evicted_for:
        return decisions
    return _started_instead_of_held(decisions, starts, preemptions, evicted_for)


# Under a queue, a free device of a type no waiting job was narrowed to would sit idle: the
# backlog's prices say other jobs will want it, but none waits for it now. A waiting job at
# least this efficient there uses it meanwhile; once a job the gate sends to that type
# waits, `evict_inefficient` hands the device over if the filler is below its threshold
# (one above it is nearly as good there as the jobs the gate sends), so a device is lent
# rather than given. Measured on Gavel's cell at 5.6 jobs/h with eviction at 0.95: average
# JCT 20.38 h without lending, 20.18 h from 0.6, 20.03 h from 0.3, 20.02 h from 0
# (bench/experiments/gavel_variants/README.md); 0.3 keeps a ResNet-50 off a K80 (0.1).
FILL_FLOOR: float | None = 0.3  # None = off


def fill_idle_devices(original: Snapshot, gate: Gate, decisions: Decisions) -> Decisions:
    """Lend devices the gate would leave idle to waiting jobs efficient enough there.

    Steps:
    1. Only when the gate is active this round.
    2. Free devices after the round's decisions: schedulable, not busy, held by no running
       job (preempted ones included: their devices are spoken for), used by no start.
    3. Per type (fastest first), held jobs without quota limits that accept the type
       (before narrowing) and are at least `FILL_FLOOR` efficient there take its free
       devices, most efficient first, then priority order; a gang takes them by best fit
       under its consolidation rule (`choose_pools`). Eviction takes back single-GPU loans
       only, so a lent gang keeps its devices until it ends or the pass preempts it: on an
       empty 1,024-GPU cluster with 300 waiting jobs, single-GPU lending left 250 GPUs
       idle that narrowed gangs accept.
    """
    prices = gate.prices
    if prices is None or FILL_FLOOR is None:
        return decisions
    held = [h.job_id for h in decisions.holds if h.reason.code in _CAPACITY_CODES]
    if not held:
        return decisions
    free: dict[str, list[int]] = {}
    node_of: dict[int, str] = {}
    for device in free_after(original, decisions):
        free.setdefault(device.device_type, []).append(device.id)
        node_of[device.id] = device.node
    if not free:
        return decisions
    from scheduler.policies.fairness import QuotaLedger  # policy-layer helper, late import

    ledger = QuotaLedger(original, [job for job in original.jobs if job.is_running])
    jobs = original.job_by_id
    position = {job_id: index for index, job_id in enumerate(decisions.order)}
    efficiency_of = _efficiency_lookup(gate)
    starts = list(decisions.starts)
    lent: set[int] = set()
    speeds = gate.type_speeds
    for device_type in sorted(free, key=lambda t: (-speeds.get(t, 0.0), t)):
        candidates: list[tuple[float, int, int]] = []
        for job_id in held:
            job = jobs[job_id]
            if (
                job_id in lent
                or not _accepts(job, device_type)
                or (ledger.has_limits and ledger.is_limited(job))
            ):
                continue
            efficiency = efficiency_of(job).get(device_type, 0.0)
            if efficiency >= FILL_FLOOR:
                candidates.append((-efficiency, position[job_id], job_id))
        candidates.sort()
        nodes: dict[str, list[int]] = {}
        for device_id in free[device_type]:
            nodes.setdefault(node_of[device_id], []).append(device_id)
        counts = {device_type: {node: len(ids) for node, ids in nodes.items()}}
        for _, _, job_id in candidates:
            job = jobs[job_id]
            choice = choose_pools(job.num_gpus, (device_type,), job.consolidation, counts)
            if choice is None:
                continue
            starts.append(Start(job_id, _take(nodes, counts[device_type], choice[1])))
            lent.add(job_id)
            if not counts[device_type]:
                break
    if not lent:
        return decisions
    return _started_instead_of_held(decisions, starts, decisions.preemptions, lent)


def explain_narrowing(original: Snapshot, narrowed: Snapshot, decisions: Decisions) -> Decisions:
    """Say in a held job's reason when the efficiency gate narrowed the types it waits for."""
    if narrowed is original:
        return decisions
    before = original.job_by_id
    after = narrowed.job_by_id
    holds: list[Hold] = []
    for hold in decisions.holds:
        job_id = hold.job_id
        if (
            hold.reason.code is ReasonCode.WAITING_FOR_RESOURCES
            and after[job_id].accepted_types != before[job_id].accepted_types
        ):
            types = ", ".join(after[job_id].accepted_types)
            detail = (
                f"{hold.reason.detail}; while jobs wait it only takes {types}, where it does "
                "the most for the queue (efficiency gate)"
            )
            hold = replace(hold, reason=Reason(hold.reason.code, detail))
        holds.append(hold)
    return replace(decisions, holds=tuple(holds))


# --------------------------------------------------------------------------- moves
# Gavel re-allocates every job every round, so a job never crawls on a K80 while a V100
# idles; gpulab's pass never moves a running job. `migrate` is that missing move: a
# running job is checkpointed off its device when a free device of a type where it runs
# faster is left over after the window step (nobody waiting wants it), and restarts there
# at the next round (the move is a preemption nobody claimed, `by_job_id = None`).

MIGRATION = True
# A move must make the job at least this much faster (relative), and gain more than the
# restore cost, so estimates that drift cannot make a job hop back and forth; a moved job is
# also protected by the minimum runtime after it restarts.
MIGRATION_MARGIN = 0.1
# Move only while no job waits for capacity. A job moved while others wait competes with
# them for its restart, and the window step may hand its target to one of them: measured on
# Gavel's experiment, moves under a queue turned into waits of hundreds of hours.
MOVE_WHILE_JOBS_WAIT = False


def migrates(settings: SchedulerSettings) -> bool:
    """Does this configuration move running jobs (the engine schedules its rounds for it)?"""
    return (
        MIGRATION
        and settings.placement is PlacementKind.ALLOX
        and settings.policy in MIGRATING_POLICIES
    )


MIGRATING_POLICIES = frozenset({"las", "gittins"})


def migrate(snapshot: Snapshot, decisions: Decisions) -> Decisions:
    """Move running jobs to device types where they run faster: into free devices, or by
    exchanging types with other running jobs (Gavel's comparative advantage).

    Steps:
    1. Free devices = schedulable, not busy, held by no job that keeps running, given to no
       start this round (after the window step: nobody waiting wanted them).
    2. Only while no job is held for capacity (`MOVE_WHILE_JOBS_WAIT`). Movers: single-GPU
       running jobs past their minimum runtime (`is_protected`), not
       preempted this round, on a schedulable node, without quota limits (a move changes
       the type they hold), and close enough to the head of the order that they will be in
       the window when they wait for their restart (else the window step of the next round
       could not see them and the move would turn into a wait).
    3. Slots per type = its free devices + the devices its movers hold. Each mover is
       assigned one slot (Hungarian, at most as many per type as there are slots); cost of
       mover j on type t = E[remaining_j] / s_{j,t} (expected seconds left there; E as in
       the matching), plus, if t is not its type, the restore cost and `MIGRATION_MARGIN` ×
       its time left where it is; a job only moves to a type where it runs at least
       (1 + `MIGRATION_MARGIN`) × as fast, so every move speeds its job up and no job can
       hop back and forth. Minimizing the sum moves a crawling job onto a free fast
       device, and swaps two jobs that each run faster on the other's type.
    4. Each mover assigned another type is preempted with `by_job_id = None`; nothing starts
       on the free devices or the movers' devices this round, so the next round (the window
       step sees the movers waiting) restarts them on their new types.
    """
    settings = snapshot.settings
    started_devices = {d for start in decisions.starts for d in start.device_ids}
    preempted = {p.job_id for p in decisions.preemptions}
    node_ok = {node.name: node.schedulable for node in snapshot.nodes}
    held_devices = {
        d
        for job in snapshot.jobs
        if job.is_running and job.id not in preempted
        for d in job.devices
    }
    free_by_type: dict[str, int] = {}
    speeds: dict[str, float] = {}
    for device in snapshot.devices:
        speeds[device.device_type] = max(speeds.get(device.device_type, 0.0), device.speed)
        if (
            device.schedulable
            and node_ok.get(device.node, True)
            and device.id not in snapshot.busy_device_ids
            and device.id not in held_devices
            and device.id not in started_devices
        ):
            free_by_type[device.device_type] = free_by_type.get(device.device_type, 0) + 1

    from scheduler.policies.base import is_protected  # policy-layer helper, late import
    from scheduler.policies.fairness import QuotaLedger

    ledger = QuotaLedger(snapshot, [job for job in snapshot.jobs if job.is_running])
    window = settings.allox_window if settings.allox_window > 0 else 1 << 30
    position = {job_id: index for index, job_id in enumerate(decisions.order)}
    waiting_at = sorted(
        position.get(h.job_id, 0) for h in decisions.holds if h.reason.code in _CAPACITY_CODES
    )
    if waiting_at and not MOVE_WHILE_JOBS_WAIT:
        return decisions
    device_by_id = snapshot.device_by_id
    movers: list[tuple[Job, Device, float]] = []  # (job, its device, its speed there)
    for job in snapshot.jobs:
        if (
            not job.is_running
            or job.num_gpus != 1
            or job.id in preempted
            or not job.devices
            or is_protected(job, snapshot)
            or (ledger.has_limits and ledger.is_limited(job))
        ):
            continue
        device = device_by_id.get(job.devices[0])
        if (
            device is None
            or not (device.schedulable and node_ok.get(device.node, True))
            or device.id in snapshot.busy_device_ids
        ):
            continue
        if bisect.bisect_left(waiting_at, position.get(job.id, 0)) >= window:
            continue  # after the move it would wait outside the next round's window
        current = job_speed(job, device.device_type, device.speed)
        if current > 0:
            movers.append((job, device, current))
    if not movers or (len(movers) < 2 and not free_by_type):
        return decisions

    slots = dict(free_by_type)
    for _, device, _ in movers:
        slots[device.device_type] = slots.get(device.device_type, 0) + 1
    types = sorted(slots, key=lambda t: (-speeds[t], t))
    estimator = RemainingService.from_snapshot(snapshot)
    restore = settings.restore_cost
    n = len(movers)
    cost = np.full((n, len(types)), np.inf)
    for row, (job, device, current) in enumerate(movers):
        remaining = estimator.expected(job.attained_service)
        here = remaining / current
        for col, t in enumerate(types):
            if t == device.device_type:
                cost[row, col] = here
                continue
            target = job_speed(job, t, speeds[t]) if _accepts(job, t) else 0.0
            if target >= (1.0 + MIGRATION_MARGIN) * current:
                cost[row, col] = remaining / target + restore + MIGRATION_MARGIN * here
    # Staying is always possible, so a quick exit when no mover can gain anything.
    stay = np.array([cost[row, types.index(m[1].device_type)] for row, m in enumerate(movers)])
    if not (cost < stay[:, None]).any():
        return decisions
    rank = 1.0 + _RANK_EPSILON * np.arange(n)[:, None]
    tie = 1.0 + _TYPE_EPSILON * np.arange(len(types))[None, :]
    finite = np.where(np.isfinite(cost), cost * rank * tie, _BIG)
    columns = np.repeat(finite, [min(slots[t], n) for t in types], axis=1)
    column_type = [t for t in types for _ in range(min(slots[t], n))]
    rows, cols = linear_sum_assignment(columns)
    moves: list[Preempt] = []
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        job, device, current = movers[row]
        target_type = column_type[col]
        if target_type == device.device_type:
            continue
        ratio = job_speed(job, target_type, speeds[target_type]) / current
        moves.append(
            Preempt(
                job.id,
                f"moving to a {target_type}, where it runs {ratio:.2f}× as fast as on its "
                f"{device.device_type}",
                None,
            )
        )
    if not moves:
        return decisions
    moves.sort(key=lambda p: position.get(p.job_id, 0))
    return replace(decisions, preemptions=decisions.preemptions + tuple(moves))


# Preemption class of a job missing from the classes: it preempts nobody.
_NEVER = 1 << 62

# Stands in for "impossible" in a cost matrix (linear_sum_assignment rejects all-inf rows).
_BIG = 1e18


def register() -> None:
    """Add `allox_place` to the placer registry (idempotent)."""
    from scheduler.policies import placement

    placement.PLACERS[PlacementKind.ALLOX] = allox_place
    placement.EXPLAINERS[PlacementKind.ALLOX] = allox_place_explained


register()
