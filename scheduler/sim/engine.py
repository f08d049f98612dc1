"""Discrete-event replay of a trace through the live scheduler's policy code.

The engine owns what the live loop's apply step owns (types.py: Start / Preempt /
QueueChange); the policy (`scheduler.policies.decide`) owns every choice. One round is:

1. advance every active job to `now` with `scheduler.core.accounting`'s arithmetic (the
   same the live loop uses; `advance_job` is its allocation-light twin, tested equal);
2. freeze a `Snapshot` and call `decide(snapshot)`;
3. check the decisions with `scheduler.core.invariants.check_decisions` (`policies.decide`
   does; `SimConfig(check_invariants=False)` calls the registered policy directly);
4. apply them: preemptions, then queue changes, then starts.

When rounds happen
------------------
A round runs at every event the live loop reacts to (job arrival, job completion) and at
the moments a timer round could decide differently without an event:

- a running job's queue key crosses its queue's upper threshold (demotion, LAS/Gittins);
- a waiting job reaches knob × executed time (starvation promotion);
- a running job's minimum runtime ends while jobs wait (it becomes preemptible).

With `tick > 0` (default 10 s, the live timer) those timer moments are rounded up to the
next multiple of `tick`, exactly when the live loop's periodic round would notice them;
timer rounds where nothing can change never happen, which is what makes a 20,000-job trace
cheap. Event rounds with no waiting job and no timer moment due are skipped too (nothing to
start, and no policy preempts without a waiting job; test_engine checks the results are
identical). Reference mode uses `tick = 0` (decide at the exact crossing time), like the
public Tiresias simulator, whose loop also wakes at arrivals, completions and queue jumps.

Work, speed and restore cost
----------------------------
A trace job brings `duration`: seconds of work at throughput 1.0. On devices of type t it
progresses at its throughput on t (`TraceJob.throughputs`, else the type's `Device.speed`);
a gang spanning several types runs at its slowest type's pace (synchronous data-parallel
training waits for the slowest worker). Attained service is separate: normalized
GPU-seconds, Σ Device.speed per second (accounting.speed_sum), what the queues compare.

Resuming a job that ran before costs `restore_cost` seconds: the job holds its devices and
accrues service (the scheduler cannot tell restoring from training) but makes no progress.
The first start is free (nothing to restore).

Perfect knowledge for SRTF/SRSF: every snapshot's `Job.total_work` is set so that
`total_work - attained_service` is the job's true remaining work in reference GPU-seconds
(remaining seconds × num_gpus), restore cost included.

Time origin
-----------
The replay runs on a clock that starts at the first submit rounded down to the tick grid
(`SimResult.time_origin`; 0 for every shipped and generated trace): a trace stamped in
nanosecond epochs (~1e18) would otherwise have no float between `now` and `now + tick`, and
the clock would stop. Every reported metric is a difference of times (JCT, waits, makespan),
so with a whole-second tick the shift changes no number (exactly so for whole-second times;
fractional ones may move in the last bit): the origin is then a multiple of the tick and
timer rounds stay on the same grid. A fractional tick is not exactly representable, so its
grid moves with the origin and results may differ slightly (1e-5 relative, measured) from
the same trace started at 0. `JobRecord` times and `busy_timeline` are on the shifted clock.

Starting from a live snapshot (forecasts)
-----------------------------------------
With `seed=Seed(snapshot, work_left)` the replay starts at `snapshot.now` with the
snapshot's jobs already there: running ones on their devices, pending ones in their
queues, users and groups with their weights, quotas and usage. Each seeded job's
`work_left` is wall seconds, done at 1 per second on any device (a walltime is wall-clock
time, whatever the GPU); the policy still sees each job's own `throughputs` for placement.
A seeded pending job that has run before pays the restore cost when it starts again.
`scheduler.forecast` uses this to predict start times; with `SimConfig.stop_when_started`
the replay ends once every job it asks about has started.

Stalls
------
A replay whose GPUs stay held while no job does any work and none finishes, round after
round, with resumed jobs preempted before they do any, is stopped (see `_StallGuard`): its
`stop_reason` starts with "stalled: " and says why, and what finished is kept, as for a
replay left "stuck". A clock that cannot move forward stops it with `ReplayError`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from scheduler.core import accounting
from scheduler.core.types import (
    Account,
    Decisions,
    Device,
    Job,
    JobPhase,
    ReasonCode,
    SchedulerSettings,
    Snapshot,
)
from scheduler.policies.placement import type_sizes
from scheduler.sim.clusters import SimCluster
from scheduler.sim.traces import TraceJob

DecideFn = Callable[[Snapshot], Decisions]

# Policies whose order can flip while nothing arrives or ends (queue crossings, knob).
QUEUE_POLICIES = frozenset({"las", "gittins"})
# Holds that leave devices the job accepts free (`allox.place_explained`).
_HELD_WHILE_FREE = frozenset({ReasonCode.WAITING_FOR_FASTER_TYPE})

# Policies that never preempt: no minimum-runtime wake-ups needed.
NON_PREEMPTIVE_POLICIES = frozenset({"fifo", "fifo-backfill"})
USAGE_HALF_LIFE = 7 * 24 * 3600.0  # algorithms.md §2: fair-share usage half-life [7 days]
_EPS = 1e-9


class SimulationError(RuntimeError):
    """The replay cannot continue (a policy bug: bad decision, or no progress ever)."""


class ReplayError(SimulationError):
    """The replay cannot continue because of its inputs, not a policy bug: the command line
    reports it without a traceback (exit status 1)."""


# A trace whose submits span more than this (about 35,000 years) from the first is refused:
# at 2^40 s a float still resolves 0.25 ms; far beyond it a job's run time rounds away.
MAX_TRACE_SPAN = float(2**40)
# Stall guard: rounds in a row with GPUs held and no work done anywhere, and repeats in
# them (a resumed job preempted before doing any work, again at the same queue level),
# before the replay is declared stalled.
STALL_ROUNDS = 1000
STALL_WASTED_RESTORES = 1000


@dataclass(slots=True)
class JobRecord:
    """What happened to one job (the input of metrics.py)."""

    id: int
    user: str
    num_gpus: int
    submit_time: float
    duration: float  # seconds of work at throughput 1.0
    ideal_runtime: float  # seconds on its fastest accepted type, uninterrupted
    finish_time: float | None = None
    first_start: float | None = None
    queueing_delay: float = 0.0  # total seconds pending, first start and after preemptions
    preemptions: int = 0
    resumes: int = 0  # starts after the first one (each pays the restore cost)
    service: float = 0.0  # normalized GPU-seconds held (includes restore time)
    promotions: int = 0
    demotions: int = 0

    @property
    def jct(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.submit_time


@dataclass
class SimResult:
    """Everything one policy's replay produced."""

    policy: str
    settings: SchedulerSettings
    cluster: SimCluster
    records: list[JobRecord]
    # (time, GPUs held) after every change, on the replay clock; starts at (first submit, 0).
    busy_timeline: list[tuple[float, int]]
    rounds: int = 0
    wall_seconds: float = 0.0
    unfinished: int = 0
    stop_reason: str = "all jobs finished"
    # The trace time the replay's clock 0 stands for: add it to a record's times (and to
    # the timeline's) for the trace's own clock. 0 unless the trace starts later.
    time_origin: float = 0.0


class _Active:
    """Mutable engine state of one job that has arrived and not finished."""

    __slots__ = (
        "as_of",
        "epoch",
        "job",
        "ran_before",
        "rate",
        "record",
        "speed",
        "stall_until",
        "trace",
        "work_left",
    )

    def __init__(self, trace: TraceJob, job: Job, record: JobRecord, now: float) -> None:
        self.trace = trace
        self.job = job
        self.record = record
        self.as_of = now
        self.work_left = trace.duration  # reference seconds of work still to do
        self.rate = 0.0  # reference seconds of work per wall second while running
        self.speed = 0.0  # Σ device speeds held: normalized GPU-seconds per second
        self.stall_until = now  # restore ends here; no progress before
        self.epoch = 0  # bumps at every start/stop, invalidating queued completions
        # Ran before the replay began (a seeded job): its next start is a resume.
        self.ran_before = False


@dataclass(frozen=True)
class SimConfig:
    """Engine knobs that are not scheduler settings."""

    tick: float = 10.0  # live timer period; 0 = exact timer moments (reference mode)
    check_invariants: bool = True
    usage_half_life: float = USAGE_HALF_LIFE
    progress: bool = False
    progress_desc: str = ""
    # Hard stop (simulated seconds after the first arrival); None = run to completion.
    horizon: float | None = None
    # Skip rounds where no job waits and no timer moment is due (they cannot decide anything).
    skip_idle_rounds: bool = True
    # Stop as soon as every one of these job ids has finished (a measurement window: what
    # arrives later cannot change their JCT); None = run on.
    stop_when_finished: frozenset[int] | None = None
    # Stop as soon as every one of these job ids has started (a forecast's question).
    stop_when_started: frozenset[int] | None = None
    # Stop after this many seconds of wall-clock time (a forecast must answer in time).
    wall_budget: float | None = None
    # A trace replay's lab groups with their weights, quotas and guarantees; a trace
    # group not listed has the defaults. Empty: every trace group has the defaults. (A
    # seeded replay takes its groups from the seed's snapshot.)
    groups: tuple[Account, ...] = ()


@dataclass(frozen=True)
class Seed:
    """A replay's starting state: a live snapshot and each job's wall seconds of work left
    (see "Starting from a live snapshot" above)."""

    snapshot: Snapshot
    work_left: Mapping[int, float]


class _StallGuard:
    """Stops a replay that holds GPUs and gets no work done, round after round.

    A resumed job holds its devices for `restore_cost` seconds without progress, on
    purpose. With a minimum runtime no longer than that, it can be preempted before it
    does any work; if restoring earns more service than a queue threshold, it is demoted
    and preempted every time it resumes, the knob promotes the job it displaced, and the
    two swap for ever without either doing any work (the replay never ends).

    Wasted restores alone prove nothing: without promotion a job is demoted at most once
    per queue, so a replay of many jobs can waste thousands of restores and still finish
    (1,100 256-GPU gangs in reference mode at restore 30 s do). What only a cycle does is
    waste a job's restore again at a queue level where it was already wasted since the
    last work anyone did. The guard counts those repeats: `STALL_ROUNDS` rounds in a row
    with GPUs held and no job doing work or finishing, with `STALL_WASTED_RESTORES`
    repeats among them, is the livelock. Work by any job, a finish, or an idle cluster
    (waiting for the next arrival is not a stall) resets it. Counting repeats rather than
    simulated seconds keeps detection at ~1000 rounds however fast the swap cycles (a
    1 GPU·s queue swaps 128-GPU jobs every 1/128 s).
    """

    __slots__ = ("repeats", "rounds", "since", "wasted_at")

    def __init__(self, now: float) -> None:
        self.reset(now)

    def reset(self, now: float) -> None:
        self.rounds = 0
        self.repeats = 0
        self.since = now
        self.wasted_at: set[tuple[int, int]] = set()

    def stalled(self, wasted: Iterable[tuple[int, int]]) -> bool:
        """Count one round without progress that preempted resumed jobs before they did
        any work, as (job id, queue level) pairs; True once both bounds are passed."""
        self.rounds += 1
        for key in wasted:
            if key in self.wasted_at:
                self.repeats += 1
            else:
                self.wasted_at.add(key)
        return self.rounds >= STALL_ROUNDS and self.repeats >= STALL_WASTED_RESTORES


def _stall_message(
    settings: SchedulerSettings, now: float, guard: _StallGuard, largest_gang: int
) -> str:
    """What stalled, the likely cause, and the remedy (in the command line's terms)."""
    head = (
        f"replay stalled at t={now:g} s: for {guard.rounds} rounds ({now - guard.since:g} s "
        "simulated) GPUs were held while no job did any work or finished, and "
        f"{guard.repeats} times a resumed job was preempted before doing any work at a queue "
        "level where that had already happened to it"
    )
    restore = settings.restore_cost
    restore_service = restore * largest_gang
    promoted = ", and the knob promotes the job it displaced" if settings.promote_knob else ""
    thresholds = settings.queue_thresholds
    if (
        settings.policy in QUEUE_POLICIES
        and settings.min_runtime <= restore
        and thresholds
        and restore_service > thresholds[0]
    ):
        return (
            f"{head}. Likely cause: resuming costs {restore:g} s (--restore-cost) x "
            f"{largest_gang} GPUs = {restore_service:g} GPU·s of service, more than the "
            f"{thresholds[0]:g} GPU·s queue threshold, and a job may be preempted after "
            f"{settings.min_runtime:g} s (--min-runtime): every resumed job is demoted and "
            f"preempted before it does any work{promoted}. "
            "Remedy: a --min-runtime well above the restore cost (the default is 300 s), a "
            "smaller --restore-cost, or larger --queues"
        )
    return (
        f"{head}. Remedy: a --min-runtime well above the restore cost (the default is 300 s), "
        "or a smaller --restore-cost"
    )


# Job's fields in declaration order: `advance_job` builds Jobs positionally (see below).
_JOB_FIELDS = (
    "id", "user", "group", "num_gpus", "submit_time", "phase", "accepted_types",
    "consolidation", "devices", "attained_service", "service_since_promotion",
    "executed_since_promotion", "waiting_since_promotion", "queue_level", "queue_entered_at",
    "started_at", "model", "throughputs", "preemptible", "reclaimable", "total_work",
    "pending_since", "starting",
)  # fmt: skip
_FAST_PATH = tuple(f.name for f in fields(Job)) == _JOB_FIELDS


def advance_job(job: Job, dt: float, speed_sum: float, total_work: float | None) -> Job:
    """`accounting.advance_running` (RUNNING) or `advance_pending` (PENDING), plus the
    perfect-knowledge `total_work`, in one positional construction.

    Why not call accounting directly: `dataclasses.replace` costs ~4.5 µs and a replay
    advances every active job every round (~10^7 times for a 20,000-job trace); the
    positional constructor costs ~2 µs. The arithmetic is accounting's, and
    test_engine.py checks this function against accounting field for field, and that
    `_FAST_PATH` is on: if Job's fields change, it turns off (accounting's functions are
    used as is) and that test says `_JOB_FIELDS` and the constructors need the new field.
    """
    running = job.phase is JobPhase.RUNNING
    if not _FAST_PATH:
        if running:
            job = accounting.advance_running(job, dt, speed_sum)
        else:
            job = accounting.advance_pending(job, dt)
        return replace(job, total_work=total_work)
    if dt < 0:
        raise ValueError(f"dt must be >= 0, got {dt}")
    if running:
        service = speed_sum * dt
        return Job(
            job.id, job.user, job.group, job.num_gpus, job.submit_time, job.phase,
            job.accepted_types, job.consolidation, job.devices,
            job.attained_service + service, job.service_since_promotion + service,
            job.executed_since_promotion + dt, job.waiting_since_promotion,
            job.queue_level, job.queue_entered_at, job.started_at, job.model,
            job.throughputs, job.preemptible, job.reclaimable, total_work,
            job.pending_since, job.starting,
        )  # fmt: skip
    # accounting.advance_pending: the wait counts only once the job has run since its
    # last promotion (the reference's `last_pending_time`); otherwise nothing changes and
    # the same object is reused (most waiting jobs on a contended trace).
    waiting = job.waiting_since_promotion
    if job.executed_since_promotion > 0:
        waiting += dt
    elif total_work == job.total_work:
        return job
    return Job(
        job.id, job.user, job.group, job.num_gpus, job.submit_time, job.phase,
        job.accepted_types, job.consolidation, job.devices, job.attained_service,
        job.service_since_promotion, job.executed_since_promotion,
        waiting, job.queue_level, job.queue_entered_at,
        job.started_at, job.model, job.throughputs, job.preemptible, job.reclaimable,
        total_work, job.pending_since, job.starting,
    )  # fmt: skip


def _checked(decide: DecideFn) -> DecideFn:
    """`decide` followed by the core invariant check (what policies.decide does)."""
    from scheduler.core.invariants import check_decisions

    def checked(snapshot: Snapshot) -> Decisions:
        decisions = decide(snapshot)
        check_decisions(snapshot, decisions)
        return decisions

    return checked


def bind_to_cluster(job: TraceJob, cluster: SimCluster) -> TraceJob:
    """`job` as it runs on `cluster`: its model's throughput row, its usable types.

    A job without its own throughputs takes its model's row of the cluster's matrix. A type
    where the job's throughput is 0 is one it cannot run on, so it leaves the job's accepted
    types (placement would otherwise park it there for ever).
    """
    if not job.throughputs and job.model in cluster.throughputs:
        job = replace(job, throughputs=cluster.throughputs[job.model])
    unusable = {device_type for device_type, value in job.throughputs if value <= 0}
    if unusable:
        accepted = job.accepted_types or cluster.device_types
        job = replace(job, accepted_types=tuple(t for t in accepted if t not in unusable))
    return job


def unplaceable_jobs(trace: Iterable[TraceJob], cluster: SimCluster) -> list[tuple[TraceJob, int]]:
    """Jobs no placement on `cluster` can ever hold, each with the most GPUs one could.

    A job never spans device types, and a `required` job must fit on one node, so the
    bound is per type: all its GPUs, or its largest node's. Jobs as `bind_to_cluster`
    leaves them (zero-throughput types already dropped).
    """
    size = type_sizes(cluster.devices)
    unplaceable = []
    for job in trace:
        types = job.accepted_types or cluster.device_types
        most = max((size(job.consolidation, t) for t in types), default=0)
        if job.num_gpus > most:
            unplaceable.append((job, most))
    return unplaceable


class Simulation:
    """One replay of `trace` on `cluster` under `settings` (see the module docstring)."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        cluster: SimCluster,
        settings: SchedulerSettings,
        *,
        decide: DecideFn | None = None,
        config: SimConfig | None = None,
        seed: Seed | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.seed = seed
        if decide is None:
            # Late import: the policies package is heavy and tests inject their own.
            from scheduler import policies

            if self.config.check_invariants:
                decide = policies.decide  # runs the policy, then check_decisions
            else:
                decide = policies.POLICIES[settings.policy]
        elif self.config.check_invariants:
            decide = _checked(decide)
        self.decide = decide
        self.trace = sorted(
            (bind_to_cluster(job, cluster) for job in trace),
            key=lambda job: (job.submit_time, job.id),
        )
        self.time_origin = _time_origin(self.trace, self.config.tick)
        if self.time_origin:
            origin = self.time_origin
            self.trace = [replace(job, submit_time=job.submit_time - origin) for job in self.trace]
        if self.trace and self.trace[-1].submit_time > MAX_TRACE_SPAN:
            raise ReplayError(
                f"the trace's submit times span {self.trace[-1].submit_time:g} s from the "
                f"first (at most {MAX_TRACE_SPAN:g} s, ~35,000 years): far apart times lose "
                "the precision a job's run time needs; check the trace's time unit"
            )
        self.cluster = cluster
        self.settings = settings
        self.devices: tuple[Device, ...] = cluster.devices
        self.device_by_id = {device.id: device for device in cluster.devices}
        # Users' weights and quotas, kept as usage changes (seeded replays; a trace's users
        # have the defaults).
        self.account_base: dict[str, Account] = {}

    # ----------------------------------------------------------------- helpers
    def _rates(self, trace: TraceJob, device_ids: Iterable[int]) -> tuple[float, float]:
        """(progress rate, speed sum) of `trace` on `device_ids`.

        Progress: the slowest type's throughput (a synchronous gang waits for its slowest
        worker); a type missing from the job's throughputs runs at Device.speed.
        """
        throughputs = trace.throughputs
        rate = math.inf
        speed = 0.0
        for device_id in device_ids:
            device = self.device_by_id[device_id]
            speed += device.speed
            value = device.speed
            for device_type, tput in throughputs:
                if device_type == device.device_type:
                    value = tput
                    break
            rate = min(rate, value)
        return (0.0 if math.isinf(rate) else rate), speed

    def _ideal_runtime(self, trace: TraceJob) -> float:
        """Uninterrupted seconds on the fastest type the job accepts (slowdown's base)."""
        best = 0.0
        types = {device.device_type: device.speed for device in self.devices}
        tput = dict(trace.throughputs)
        for device_type, speed in types.items():
            if trace.accepted_types and device_type not in trace.accepted_types:
                continue
            best = max(best, tput.get(device_type, speed))
        return trace.duration / best if best > 0 else math.inf

    # ------------------------------------------------------------------- run
    def run(self) -> SimResult:
        import time

        started_wall = time.perf_counter()
        settings = self.settings
        config = self.config
        total_gpus = len(self.devices)
        records = [
            JobRecord(
                id=trace.id,
                user=trace.user,
                num_gpus=trace.num_gpus,
                submit_time=trace.submit_time,
                duration=trace.duration,
                ideal_runtime=self._ideal_runtime(trace),
            )
            for trace in self.trace
        ]
        result = SimResult(
            policy=settings.policy,
            settings=settings,
            cluster=self.cluster,
            records=records,
            busy_timeline=[],
            time_origin=self.time_origin,
        )
        if not self.trace and self.seed is None:
            result.wall_seconds = time.perf_counter() - started_wall
            return result

        arrivals = deque(zip(self.trace, records, strict=True))
        active: dict[int, _Active] = {}
        running: set[int] = set()
        completions: list[tuple[float, int, int]] = []  # (time, epoch, job id)
        finished_sizes: deque[float] = deque(maxlen=max(settings.gittins_history, 1))
        finished_sizes_tuple: tuple[float, ...] = ()
        users: dict[str, list[float]] = {}  # name -> [usage, as_of]
        groups: set[str] = set()
        busy = 0
        now = self.seed.snapshot.now if self.seed is not None else self.trace[0].submit_time
        start_time = now
        result.busy_timeline.append((now, 0))
        wakeup = wakeup_exact = math.inf
        queue_policy = settings.policy in QUEUE_POLICIES
        preemptive = settings.policy not in NON_PREEMPTIVE_POLICIES
        knob = settings.promote_knob or 0.0
        thresholds = settings.queue_thresholds
        tick = config.tick
        horizon = None if config.horizon is None else start_time + config.horizon
        # Placements that move running jobs to faster free devices (allox.migrates): a
        # device freed by a completion can matter with nothing waiting, and a job moved off
        # its device restarts at the next timer round.
        from scheduler.policies.allox import migrates

        migrating = migrates(settings)
        watched = set(config.stop_when_finished or ())
        not_started = set(config.stop_when_started or ())
        deadline = None if config.wall_budget is None else started_wall + config.wall_budget
        stall = _StallGuard(now)
        progressed = False  # some job did work since the last round (see _StallGuard)

        progress = None
        if config.progress:
            from tqdm import tqdm

            progress = tqdm(
                total=len(records), desc=config.progress_desc or settings.policy, unit="job"
            )

        def advance(state: _Active, to: float) -> None:
            """Fold the time since `state.as_of` into the job (accounting + work).

            Also refreshes `total_work` (perfect knowledge) in the same new Job.
            """
            nonlocal progressed
            dt = to - state.as_of
            if dt <= 0:
                return
            job = state.job
            if job.phase is JobPhase.RUNNING:
                service = state.speed * dt
                state.record.service += service
                productive = to - max(state.as_of, state.stall_until)
                if productive > 0 and state.rate > 0:
                    state.work_left -= state.rate * productive
                    progressed = True
                usage = users.get(state.trace.user)
                if usage is not None:
                    usage[0] += service
                total = job.attained_service + service + max(state.work_left, 0.0) * job.num_gpus
                state.job = advance_job(job, dt, state.speed, total)
            else:
                state.record.queueing_delay += dt
                state.job = advance_job(job, dt, 0.0, job.total_work)
            state.as_of = to

        def schedule_completion(state: _Active, at: float) -> None:
            if state.rate <= 0:
                return  # never finishes on these devices; the policy must move it
            done = max(at, state.stall_until) + max(state.work_left, 0.0) / state.rate
            heapq.heappush(completions, (done, state.epoch, state.job.id))

        def note_busy(at: float) -> None:
            timeline = result.busy_timeline
            if busy != timeline[-1][1]:
                if timeline[-1][0] == at:
                    timeline[-1] = (at, busy)
                else:
                    timeline.append((at, busy))

        def round_up(t: float) -> float:
            if tick <= 0:
                return t
            return math.ceil(t / tick - 1e-9) * tick

        group_accounts: tuple[Account, ...] | None = None
        if config.groups:
            listed = {account.name for account in config.groups}
            extra = sorted({t.group for t in self.trace if t.group and t.group not in listed})
            group_accounts = (*config.groups, *(Account(name=name) for name in extra))
        if self.seed is not None:
            seed_snapshot = self.seed.snapshot
            for state in self._seeded(self.seed):
                records.append(state.record)
                active[state.job.id] = state
                if state.job.phase is JobPhase.RUNNING:
                    running.add(state.job.id)
                    busy += len(state.job.devices)
                    schedule_completion(state, now)
            for account in seed_snapshot.users:
                users[account.name] = [account.usage, now]
                self.account_base[account.name] = account
            group_accounts = seed_snapshot.groups
            finished_sizes.extend(seed_snapshot.finished_job_sizes)
            finished_sizes_tuple = tuple(finished_sizes)
            note_busy(now)
            # A round at once: free GPUs may start a pending job before anything ends.
            wakeup = wakeup_exact = now

        rounds = 0
        stop_reason = "all jobs finished"
        while arrivals or active:
            # 1. Next event: completion, arrival or timer wake-up.
            while completions and (
                completions[0][2] not in active
                or active[completions[0][2]].epoch != completions[0][1]
            ):
                heapq.heappop(completions)  # stale: the job was preempted or moved
            t_done = completions[0][0] if completions else math.inf
            t_arrive = arrivals[0][0].submit_time if arrivals else math.inf
            t_next = min(t_done, t_arrive, wakeup)
            if math.isinf(t_next):
                stop_reason = (
                    f"stuck: {len(active)} job(s) wait and nothing can start them "
                    "(too large for the cluster, or the policy never starts them)"
                )
                break
            if horizon is not None and t_next > horizon:
                stop_reason = f"horizon of {config.horizon:g} s reached"
                break
            now = max(now, t_next)

            # 2. Completions at `now` (the reference ends jobs before it admits new ones).
            finished_any = False
            while completions and completions[0][0] <= now + _EPS:
                _, epoch, job_id = heapq.heappop(completions)
                state = active.get(job_id)
                if state is None or state.epoch != epoch:
                    continue
                advance(state, now)
                state.record.finish_time = now
                busy -= len(state.job.devices)
                running.discard(job_id)
                del active[job_id]
                finished_sizes.append(state.job.attained_service)
                finished_any = True
                watched.discard(job_id)
                if progress is not None:
                    progress.update(1)
            if finished_any:
                finished_sizes_tuple = tuple(finished_sizes)
            if config.stop_when_finished is not None and not watched:
                stop_reason = "every watched job finished"
                break

            # 3. Arrivals at `now`: new jobs enter queue 0 at its tail.
            while arrivals and arrivals[0][0].submit_time <= now + _EPS:
                trace, record = arrivals.popleft()
                if trace.user not in users:
                    users[trace.user] = [0.0, now]
                if trace.group:
                    groups.add(trace.group)
                job = Job(
                    id=trace.id,
                    user=trace.user,
                    group=trace.group,
                    num_gpus=trace.num_gpus,
                    submit_time=trace.submit_time,
                    phase=JobPhase.PENDING,
                    accepted_types=trace.accepted_types,
                    consolidation=trace.consolidation,
                    queue_level=0,
                    queue_entered_at=now,
                    model=trace.model,
                    throughputs=trace.throughputs,
                    total_work=trace.duration * trace.num_gpus,
                    pending_since=now,
                )
                active[trace.id] = _Active(trace, job, record, now)

            # 4. Skip a round that cannot decide anything: no job waits (so nothing can
            # start, and no policy preempts without a waiting job) and no timer moment is
            # due (queue crossings and promotions get their own wake-up rounds). Identical
            # results, checked by test_engine; most completions at moderate load are these.
            # (`wakeup_exact`, not the tick-rounded `wakeup`: a crossing already past but
            # not yet ticked would be seen by this round, so it must run.)
            timer_due = wakeup_exact <= now + _EPS
            if (
                config.skip_idle_rounds
                and not timer_due
                and len(running) == len(active)
                and not (migrating and finished_any)
            ):
                note_busy(now)
                continue

            # 5. One round over everything active.
            jobs_list: list[Job] = []
            for state in active.values():
                advance(state, now)
                jobs_list.append(state.job)
            accounts = self._accounts(users, now)
            snapshot = Snapshot(
                now=now,
                jobs=tuple(jobs_list),
                devices=self.devices,
                nodes=self.cluster.nodes,
                users=accounts,
                groups=(
                    group_accounts
                    if group_accounts is not None
                    else tuple(Account(name=g) for g in sorted(groups))
                ),
                settings=settings,
                finished_job_sizes=finished_sizes_tuple,
            )
            decisions = self.decide(snapshot)
            rounds += 1
            # Resumed jobs this round preempts before they did any work (the stall guard's
            # evidence; a preemption the moment the restore ends wastes it too). Counted
            # before _apply, which raises on a preemption of a job that is not running.
            wasted = [
                (preempt.job_id, active[preempt.job_id].job.queue_level)
                for preempt in decisions.preemptions
                if preempt.job_id in active
                and active[preempt.job_id].stall_until >= now
                and active[preempt.job_id].record.resumes
            ]
            busy += self._apply(decisions, active, running, now)
            for start in decisions.starts:
                schedule_completion(active[start.job_id], now)
                not_started.discard(start.job_id)
            note_busy(now)
            if config.stop_when_started is not None and not not_started:
                stop_reason = "every watched job started"
                break
            if deadline is not None and time.perf_counter() > deadline:
                stop_reason = f"wall-clock budget of {config.wall_budget:g} s used up"
                break
            if busy > total_gpus:
                raise SimulationError(f"t={now}: {busy} GPUs held on a {total_gpus}-GPU cluster")
            if progressed or finished_any or busy == 0:
                progressed = False
                stall.reset(now)
            elif stall.stalled(wasted):
                gang = max(state.job.num_gpus for state in active.values())
                stop_reason = "stalled: " + _stall_message(settings, now, stall, gang)
                break

            # 6. Next timer moment at which this policy could decide differently.
            wakeup = math.inf
            has_pending = len(running) < len(active)
            # The next timer round, as in the live loop, after
            # - a move (a preemption nobody claimed): the job restarts there;
            # - a round that started jobs while AlloX held another with devices it accepts
            #   free (α, or a faster type it expects to finish sooner on): the starts change
            #   the users' shares and the busy devices' delays, so that round may place it.
            #   Only after starts, so a hold that stays put cannot make rounds spin.
            moved = any(preempt.by_job_id is None for preempt in decisions.preemptions)
            if moved or (
                decisions.starts
                and any(hold.reason.code in _HELD_WHILE_FREE for hold in decisions.holds)
            ):
                wakeup = now + max(tick, 1.0)
            may_move = migrating and busy < total_gpus
            for state in active.values():
                job = state.job
                if job.phase is JobPhase.RUNNING:
                    # A crossing only matters to a decision while some job waits (it may
                    # make this job a victim); otherwise the next round sees the new level
                    # anyway, with the exact crossing moment as its queue entry time
                    # (`QueueChange.entered_at`). With 12 queues this saves most rounds of
                    # a moderately loaded replay.
                    if (
                        queue_policy
                        and has_pending
                        and job.queue_level < len(thresholds)
                        and state.speed > 0
                    ):
                        left = thresholds[job.queue_level] - job.service_since_promotion
                        wakeup = min(wakeup, now + max(left, 0.0) / state.speed)
                    if (
                        preemptive
                        and (has_pending or may_move)
                        and job.started_at is not None
                        and now - job.started_at < settings.min_runtime
                    ):
                        wakeup = min(wakeup, job.started_at + settings.min_runtime)
                elif queue_policy and knob > 0 and job.queue_level > 0:
                    executed = job.executed_since_promotion
                    if executed > 0:
                        due = now + max(knob * executed - job.waiting_since_promotion, 0.0)
                        wakeup = min(wakeup, due)
            # The policy's own clocks (preemption patience, starvation guard).
            if decisions.wake_at is not None and decisions.wake_at > now + _EPS:
                wakeup = min(wakeup, decisions.wake_at)
            wakeup_exact = wakeup
            if not math.isinf(wakeup):
                wakeup = round_up(wakeup)
                if wakeup <= now + _EPS:
                    # The policy saw the crossing and did not act on it: do not spin.
                    wakeup = round_up(now + max(tick, 1.0))
                    if wakeup <= now:
                        # Only a clock too large for its tick gets here (the time origin
                        # makes that unlikely); looping at `now` would never end.
                        if progress is not None:
                            progress.close()
                        raise ReplayError(
                            f"t={now:g}: the clock cannot move past now: the next timer "
                            f"moment, {max(tick, 1.0):g} s later, rounds back to it in floating "
                            "point; times this large lose that precision (check the trace's "
                            "time unit and durations)"
                        )

        if progress is not None:
            progress.close()
        result.rounds = rounds
        result.unfinished = sum(1 for record in records if record.finish_time is None)
        result.stop_reason = stop_reason if result.unfinished else "all jobs finished"
        last = max((r.finish_time for r in records if r.finish_time is not None), default=now)
        if result.busy_timeline[-1][0] < last:
            result.busy_timeline.append((last, busy))
        result.wall_seconds = time.perf_counter() - started_wall
        return result

    def _seeded(self, seed: Seed) -> list[_Active]:
        """The engine state of a seed's jobs at `seed.snapshot.now` (see `Seed`)."""
        now = seed.snapshot.now
        # Wall seconds of work at 1 per second on every device type (see `Seed`).
        unit = tuple((device_type, 1.0) for device_type in self.cluster.device_types)
        states = []
        for job in seed.snapshot.jobs:
            work = max(float(seed.work_left[job.id]), 0.0)
            trace = TraceJob(
                id=job.id,
                num_gpus=job.num_gpus,
                submit_time=job.submit_time,
                duration=work,
                model=job.model,
                user=job.user,
                group=job.group,
                consolidation=job.consolidation,
                throughputs=unit,
                accepted_types=job.accepted_types,
            )
            record = JobRecord(
                id=job.id,
                user=job.user,
                num_gpus=job.num_gpus,
                submit_time=job.submit_time,
                duration=work,
                ideal_runtime=work,
                first_start=job.started_at if job.phase is JobPhase.RUNNING else None,
            )
            state = _Active(trace, job, record, now)
            state.ran_before = job.attained_service > 0 or job.phase is JobPhase.RUNNING
            if job.phase is JobPhase.RUNNING:
                state.rate, state.speed = self._rates(trace, job.devices)
            states.append(state)
        return states

    # ---------------------------------------------------------------- apply
    def _accounts(self, users: dict[str, list[float]], now: float) -> tuple[Account, ...]:
        """Users with decayed usage (fair share); usage decays at the configured half-life."""
        accounts = []
        half_life = self.config.usage_half_life
        for name, entry in users.items():
            usage, as_of = entry
            if now > as_of:
                usage = accounting.decay_usage(usage, now - as_of, half_life)
                entry[0], entry[1] = usage, now
            base = self.account_base.get(name)
            accounts.append(
                Account(name=name, usage=usage) if base is None else replace(base, usage=usage)
            )
        accounts.sort(key=lambda account: account.name)
        return tuple(accounts)

    def _apply(
        self,
        decisions: Decisions,
        active: dict[int, _Active],
        running: set[int],
        now: float,
    ) -> int:
        """Apply one round's decisions; returns the change in GPUs held."""
        delta = 0
        held: set[int] = set()
        for job_id in running:
            held.update(active[job_id].job.devices)
        for preempt in decisions.preemptions:
            state = active.get(preempt.job_id)
            if state is None or state.job.phase is not JobPhase.RUNNING:
                raise SimulationError(f"t={now}: preempt of job {preempt.job_id}, not running")
            delta -= len(state.job.devices)
            held.difference_update(state.job.devices)
            state.job = accounting.mark_preempted(state.job, now)
            state.record.preemptions += 1
            state.rate = state.speed = 0.0
            state.epoch += 1
            running.discard(preempt.job_id)
        for change in decisions.queue_changes:
            state = active.get(change.job_id)
            if state is None:
                raise SimulationError(f"t={now}: queue change for unknown job {change.job_id}")
            if change.promoted:
                state.record.promotions += 1
            elif change.level > state.job.queue_level:
                state.record.demotions += 1
            state.job = accounting.apply_queue_change(state.job, change, now)
        for start in decisions.starts:
            state = active.get(start.job_id)
            if state is None or state.job.phase is not JobPhase.PENDING:
                raise SimulationError(f"t={now}: start of job {start.job_id}, not pending")
            devices = tuple(start.device_ids)
            if len(devices) != state.job.num_gpus or len(set(devices)) != len(devices):
                raise SimulationError(
                    f"t={now}: job {start.job_id} needs {state.job.num_gpus} GPUs, "
                    f"got {len(devices)} device(s)"
                )
            clash = held.intersection(devices)
            if clash:
                raise SimulationError(f"t={now}: job {start.job_id} given busy devices {clash}")
            held.update(devices)
            state.job = accounting.mark_started(state.job, devices, now)
            state.rate, state.speed = self._rates(state.trace, devices)
            record = state.record
            resumed = record.first_start is not None or state.ran_before
            if record.first_start is None:
                record.first_start = now
            if not resumed:
                state.stall_until = now
            else:
                # Resume from checkpoint: restore_cost seconds with devices but no progress.
                record.resumes += 1
                state.stall_until = now + self.settings.restore_cost
            state.epoch += 1
            running.add(start.job_id)
            delta += len(devices)
        return delta


def _time_origin(trace: Sequence[TraceJob], tick: float) -> float:
    """The trace time the replay's clock starts from: the first submit, rounded down to a
    multiple of `tick` so timer rounds land on the same grid as without the shift."""
    if not trace or trace[0].submit_time <= 0:
        return 0.0
    first = trace[0].submit_time
    if tick <= 0:
        return first
    origin = math.floor(first / tick) * tick
    return origin - tick if origin > first else origin


def simulate(
    trace: Sequence[TraceJob],
    cluster: SimCluster,
    settings: SchedulerSettings,
    *,
    decide: DecideFn | None = None,
    config: SimConfig | None = None,
) -> SimResult:
    """Replay `trace` on `cluster` with `settings` (see `Simulation`)."""
    return Simulation(trace, cluster, settings, decide=decide, config=config).run()
