"""The scheduler's frozen vocabulary: what a round sees and what it decides.

Everything here is pure Python (no Django): the live loop builds a `Snapshot` from
PostgreSQL rows, the trace simulator builds one from its own state, and both hand it
to the same `decide(snapshot) -> Decisions` function. Time is always passed in
(`Snapshot.now`, seconds); policies never read a clock.

Units:
- times and durations are seconds (floats);
- service is GPU-seconds normalized to the reference device speed 1.0: one second
  on a device of speed 2.0 counts as two (algorithms.md §1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType


class Consolidation(StrEnum):
    """How a multi-GPU job may be spread over nodes."""

    REQUIRED = "required"  # all GPUs on one node, or wait
    PREFERRED = "preferred"  # one node if any fits, else as few nodes as possible
    ANY = "any"  # placement does not matter to this job


class JobPhase(StrEnum):
    """The two states a policy reasons about.

    The live system has more (STARTING, PREEMPTING, ...); the adapter maps STARTING to
    RUNNING with `Job.starting` set (it holds devices, but may not be preempted yet) and
    leaves PREEMPTING jobs out of the job list while still marking their devices busy
    through `Snapshot.busy_device_ids` and listing what they hold in
    `Snapshot.stopping_jobs` (quotas count it).
    """

    PENDING = "pending"
    RUNNING = "running"


class PlacementKind(StrEnum):
    BEST_FIT = "best-fit"  # Tiresias-style consolidation + least fragmentation
    ALLOX = "allox"  # AlloX min-cost matching over interchangeable device types
    GPU_COUNT = "gpu-count"  # reference mode: any free GPUs, node boundaries ignored


@dataclass(frozen=True, slots=True)
class Device:
    id: int
    node: str
    device_type: str  # e.g. "a100", "v100", "rtx3090"
    speed: float = 1.0  # relative speed set by admins; 1.0 is the reference
    # False for a GPU an admin cordoned (out of service): a job that holds it keeps it, as
    # on a drained node, nothing new starts there, and preempting that job frees nothing.
    # It is still in the snapshot, held or not, so a job that would fit with it in service
    # is held NodeDrained (an admin can act), not TypeUnavailable (change the request).
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    # False while draining, drained or down: running jobs keep their devices, nothing new starts.
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class Quota:
    """Hard limits; None means unlimited."""

    max_gpus: int | None = None
    max_running_jobs: int | None = None
    max_pending_jobs: int | None = None  # enforced at submission; carried for completeness
    max_gpus_by_type: tuple[tuple[str, int], ...] = ()  # (device_type, max GPUs of that type)


@dataclass(frozen=True, slots=True)
class Account:
    """A user or a lab group, as far as fairness and quotas are concerned."""

    name: str
    weight: float = 1.0
    usage: float = 0.0  # decayed normalized GPU-seconds (half-life is a setting of the accounting)
    quota: Quota = Quota()
    # Groups only: GPUs the group gets back by preempting jobs that borrow beyond their own
    # group's guarantee (Kueue's nominal quota; scheduler/policies/guarantees.py). 0 = none.
    guaranteed_gpus: int = 0


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    user: str
    group: str | None
    num_gpus: int
    submit_time: float
    phase: JobPhase
    accepted_types: tuple[str, ...] = ()  # in order of preference; empty = any type
    consolidation: Consolidation = Consolidation.PREFERRED
    devices: tuple[int, ...] = ()  # device ids held now (RUNNING only)

    # Tiresias state. The queue key is service since the last promotion (the reference
    # simulator's `executed_time × num_gpu`), so a promoted job starts again at queue 0.
    attained_service: float = 0.0  # normalized GPU-seconds over the job's whole life
    service_since_promotion: float = 0.0  # normalized GPU-seconds, the queue key
    executed_since_promotion: float = 0.0  # wall seconds run since the last promotion
    waiting_since_promotion: float = 0.0  # wall seconds pending since the last promotion
    queue_level: int = 0
    queue_entered_at: float = 0.0  # when the job entered its current queue (FIFO key)
    started_at: float | None = None  # when the current run began (minimum runtime)

    # Speed knowledge for heterogeneous placement (AlloX): throughput of this job on each
    # device type relative to the reference speed 1.0. Missing types fall back to Device.speed.
    model: str = ""
    throughputs: tuple[tuple[str, float], ...] = ()
    preemptible: bool = True
    # Not preemptible, except to give a group its guarantee back when this job runs beyond
    # its own group's (an interactive session: Run:ai's non-preemptible-within-quota).
    reclaimable: bool = False

    # Perfect knowledge, set by the simulator only (SRTF/SRSF reference policies).
    # Total work in normalized GPU-seconds; remaining = total_work - attained_service.
    total_work: float | None = None
    # When the current pending spell began (submission, or the last preemption or requeue);
    # None while running. The clock of preemption patience and of the starvation guard.
    pending_since: float | None = None
    # RUNNING in the policy's terms but still STARTING in the live loop (its devices are
    # allocated, its process may still be pulling its image). The job state machine only
    # lets a RUNNING job be preempted, so a preemption of a starting job would be dropped
    # at apply, and its claimant's start with it, every round until the launch ends: no
    # policy offers it as a victim or a mover (`policies.base.is_protected`). The
    # simulator has no starting phase and never sets it.
    starting: bool = False

    @property
    def is_running(self) -> bool:
        return self.phase is JobPhase.RUNNING


@dataclass(frozen=True, slots=True)
class StoppingJob:
    """A job that still holds devices while it stops, and that the policy may not touch.

    In the live loop: a PREEMPTING job checkpointing during its grace period. Its devices
    are in `Snapshot.busy_device_ids`; until it lets go of them they still count against
    its user's and group's quotas (GPUs, GPUs per type, running jobs), or a user at
    max_gpus would get a second job started beside the one still holding its GPU.
    The simulator has none (its preemptions free devices at once).
    """

    id: int
    user: str
    group: str | None
    devices: tuple[int, ...]
    # The waiting job its devices go to once it lets go of them (the preemption's
    # claimant); None for a move, a drain or a cancel.
    for_job: int | None = None


# 3600 x 2^i GPU-seconds, i = 0..10: Tiresias' first threshold (1 GPU-hour), then doubling
# up to 1024 GPU-hours: 12 queues.
DEFAULT_QUEUE_THRESHOLDS: tuple[float, ...] = tuple(3600.0 * 2**i for i in range(11))


# Tiresias' own rules as algorithms.md states them: 2 queues at 3600 GPU-s, knob 8, a job
# preempts any lower queue at once, no victim limit, no starvation guard. gpulab's default
# before its churn control; for comparisons (benches) and for tests of Tiresias' mechanics.
TIRESIAS_RULES: Mapping[str, object] = MappingProxyType(
    {
        "queue_thresholds": (3600.0,),
        "promote_knob": 8.0,
        "preempt_patience": 0.0,
        "preempt_margin": 1,
        "max_victims": 0,
        "starvation_seconds": 0.0,
    }
)


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """Every knob of a round. Defaults are algorithms.md's bracketed values."""

    policy: str = "las"
    placement: PlacementKind = PlacementKind.ALLOX
    # GPU-seconds; K = len + 1 queues. gpulab's default keeps Tiresias' first queue (jobs
    # under 1 GPU-hour) and splits the rest into doubling queues: close to continuous LAS
    # for long jobs, which wins on heavy-tailed sizes, instead of one FIFO queue for
    # everything past 1 GPU-hour. The churn that more queues cause under Tiresias' rules is
    # what `preempt_patience`, `preempt_margin` and `max_victims` take away (bench/README.md).
    queue_thresholds: tuple[float, ...] = DEFAULT_QUEUE_THRESHOLDS
    promote_knob: float | None = 4.0  # None or 0 = starvation promotion off
    fairness: float = 1.0  # 0 = arrival order only, 1 = fair share strictly first
    min_runtime: float = 300.0  # seconds a job runs before it may be preempted
    # Churn control (gpulab, beyond Tiresias). A waiting job may preempt only once it has
    # waited `preempt_patience` seconds in this pending spell (most waits on a busy cluster
    # end by a completion within minutes), only jobs at least `preempt_margin` queues below
    # its own (1 = Tiresias: any lower queue), and at most `max_victims` jobs per round
    # (0 = no limit). A starving job is exempt from all three.
    preempt_patience: float = 600.0
    preempt_margin: int = 3
    max_victims: int = 1
    # Starvation guard: a multi-GPU job pending `starvation_seconds` in one spell (a
    # single-GPU job cannot be passed over by backfill, `las.starving_jobs`) preempts any lower
    # queue, the widest victims first, with no victim limit, and while it cannot start no
    # job of a lower queue starts behind it (a reservation: otherwise small jobs keep
    # refilling the devices a 16-GPU job is waiting for). 0 = off.
    starvation_seconds: float = 3600.0
    restore_cost: float = 30.0  # seconds of service lost per resume (simulator; estimates)
    allox_alpha: float = 0.5
    allox_window: int = 50
    # AlloX efficiency gate: under a queue, a waiting job only takes device types where it is
    # at least this efficient at the backlog's prices (scheduler/policies/prices.py), so a
    # K80 goes to a model that runs well there, not to a ResNet at 0.14x. 1 = only the types
    # the backlog's optimal allocation gives its kind of job (measured best on Gavel's cell,
    # bench/README-gavel.md); 0 = off.
    allox_efficiency_gate: float = 1.0
    gittins_history: int = 1000  # finished jobs the size distribution is learned from
    gittins_min_samples: int = 50  # below this, the shipped prior is used


@dataclass(frozen=True)
class Snapshot:
    """A frozen view of the cluster at `now`.

    Tuples, not dicts, so the snapshot is immutable and hashable-free of aliasing;
    the `*_by_*` indexes are computed once on first use.
    """

    now: float
    jobs: tuple[Job, ...]
    devices: tuple[Device, ...]
    nodes: tuple[Node, ...] = ()
    users: tuple[Account, ...] = ()
    groups: tuple[Account, ...] = ()
    settings: SchedulerSettings = field(default_factory=SchedulerSettings)
    # Devices held by work the policy may not touch (e.g. jobs being preempted right now).
    busy_device_ids: frozenset[int] = frozenset()
    # Jobs among that work that still count against quotas (PREEMPTING jobs), by id.
    stopping_jobs: tuple[StoppingJob, ...] = ()
    # Normalized GPU-seconds of recently ended jobs (succeeded, failed or cancelled after
    # running: the service each got before it left), newest last (Gittins distribution).
    finished_job_sizes: tuple[float, ...] = ()

    @cached_property
    def job_by_id(self) -> dict[int, Job]:
        return {job.id: job for job in self.jobs}

    @cached_property
    def device_by_id(self) -> dict[int, Device]:
        return {device.id: device for device in self.devices}

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    @cached_property
    def user_by_name(self) -> dict[str, Account]:
        return {user.name: user for user in self.users}

    @cached_property
    def group_by_name(self) -> dict[str, Account]:
        return {group.name: group for group in self.groups}


class ReasonCode(StrEnum):
    """Why a job is held; the codes users and the UI filter on (product.md §4)."""

    QUOTA_EXCEEDED = "QuotaExceeded"
    WAITING_FOR_RESOURCES = "WaitingForResources"
    TYPE_UNAVAILABLE = "TypeUnavailable"
    BEHIND = "Behind"  # higher-priority jobs are ahead of it
    NODE_DRAINED = "NodeDrained"
    # Free devices are kept for a starving job of a higher queue (the starvation guard).
    RESERVED = "Reserved"
    # AlloX expects the job to finish sooner on a busier, faster type than on a free one.
    WAITING_FOR_FASTER_TYPE = "WaitingForFasterType"
    # The owner's account is disabled: nothing of theirs starts (running jobs run on). Set
    # by the live loop's adapter, which leaves such jobs out of the snapshot.
    OWNER_DISABLED = "OwnerDisabled"
    # The owner is no longer a member of the job's group (Slurm's InvalidAccount): started,
    # it would be charged to that group. Set by the adapter, like OWNER_DISABLED.
    INVALID_ACCOUNT = "InvalidAccount"
    # It waits for jobs it depends on (Slurm's Dependency), or one of them ended in a way
    # that can never satisfy it (DependencyNeverSatisfied). Set by the adapter, likewise.
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"
    # Its array runs as many tasks as it may at once (Slurm's JobArrayTaskLimit). Set by
    # the adapter, likewise.
    ARRAY_LIMIT = "ArrayLimit"


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    detail: str  # e.g. "group max GPUs 16", "needs 8 × a100 on one node"

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    device_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: int
    reason: str  # a sentence a person can read
    by_job_id: int | None = None  # the job that needed the devices, when there is one


@dataclass(frozen=True, slots=True)
class Hold:
    job_id: int
    reason: Reason
    position: int  # 1-based place among pending jobs in the scheduler's order


@dataclass(frozen=True, slots=True)
class QueueChange:
    """A job moved between Tiresias queues this round.

    The apply step stores `level`, sets `queue_entered_at` to `entered_at` (or
    `snapshot.now` when None), and when `promoted` resets the since-promotion counters to
    zero and starts a new pending spell.
    """

    job_id: int
    level: int
    promoted: bool = False
    # When a running job's service actually crossed the threshold (its FIFO key in the new
    # queue), so the order does not depend on when a round happened to notice.
    entered_at: float | None = None


@dataclass(frozen=True)
class Decisions:
    """A round's output. Running jobs not named in `preemptions` keep their devices."""

    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    holds: tuple[Hold, ...] = ()
    queue_changes: tuple[QueueChange, ...] = ()
    # Every active job id in the policy's priority order (the queue page shows this).
    order: tuple[int, ...] = ()
    # The earliest moment at which this policy would decide differently even if no job
    # arrives, ends or crosses a threshold (a patience or starvation clock running out);
    # None = no such moment. The simulator wakes then; the live loop's timer covers it.
    wake_at: float | None = None
