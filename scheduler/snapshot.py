"""The adapter from PostgreSQL rows to the scheduler's frozen `Snapshot`.

The only module (with the apply step in services.py) that knows both worlds. It reads
with `values()` rather than model instances: a round with 10,000 pending jobs must build
its snapshot in tens of milliseconds.

Accounting is stored as of each job's last transition (jobs.services); here the live part
is added: waiting time since the job became eligible (`eligible_since`: its pending spell,
a retry's backoff left out) for pending jobs, and speed × seconds on the held devices since
the allocation started for running ones (decayed per GPU-second for fair-share usage).
"""

from __future__ import annotations

import functools
import heapq
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from accounts.models import DeviceTypeQuota, LabGroup, User
from agents.selectors import JobProgram, argv_text, measured_rates
from cluster.choices import DeviceKind, NodeState
from cluster.models import Device, Node
from cluster.selectors import jobs_may_span_nodes
from jobs.choices import TERMINAL_STATES, DependencyKind, JobState
from jobs.models import Allocation, Job
from scheduler.core.accounting import (
    decay_usage,
    decayed_service,
    eligible_since,
    held_rate,
    live_service,
)
from scheduler.core.speeds import relative_speeds
from scheduler.core.types import (
    Account,
    Consolidation,
    JobPhase,
    Quota,
    Reason,
    ReasonCode,
    SchedulerSettings,
    Snapshot,
    StoppingJob,
)
from scheduler.core.types import Device as DeviceView
from scheduler.core.types import Job as JobView
from scheduler.core.types import Node as NodeView
from scheduler.selectors import devices_stopping

# Jobs the policy reasons about. PREEMPTING jobs still hold their devices while they
# checkpoint, so their devices are busy, but the policy may not start or preempt them.
SNAPSHOT_STATES = (JobState.PENDING, JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING)

# Held, not scheduled: a disabled account starts nothing new, while its running jobs run on
# (Slurm's semantics for a user whose association is removed: running work is not killed).
OWNER_DISABLED_REASON = str(Reason(ReasonCode.OWNER_DISABLED, "the owner's account is disabled"))


def not_a_member_reason(group_name: str) -> str:
    """Why a pending job whose owner left its group is held: started, it would be charged
    to that group and drawn from its quota (Slurm holds such jobs as InvalidAccount).
    Running jobs run on."""
    detail = (
        f"the owner is no longer a member of group {group_name}; an admin can add them "
        "back, or the job can be cancelled and submitted again"
    )
    return str(Reason(ReasonCode.INVALID_ACCOUNT, detail))


def dependency_reasons(pending: dict[int, str]) -> tuple[dict[int, str], dict[int, datetime]]:
    """Of pending jobs (id -> dependency kind), those their dependencies hold back, with
    the reason: some still to end (afterany) or to succeed (afterok); or, for afterok,
    one that ended without succeeding, so the job never starts (Slurm's
    DependencyNeverSatisfied: it stays pending for its owner to cancel or resubmit).

    Also, for those no longer held, when their last dependency ended: their wait starts
    there, not at submission (a pipeline's step would otherwise count hours it was held
    as waiting, and pass the starvation guard the moment it is free).
    """
    if not pending:
        return {}, {}
    edges: dict[int, list[tuple[int, str, datetime | None]]] = defaultdict(list)
    through = Job.depends_on.through
    for job_id, needed_id, needed_state, needed_end in through.objects.filter(
        from_job_id__in=list(pending)
    ).values_list("from_job_id", "to_job_id", "to_job__state", "to_job__finished_at"):
        edges[job_id].append((needed_id, needed_state, needed_end))
    reasons: dict[int, str] = {}
    released: dict[int, datetime] = {}
    for job_id, edge_list in edges.items():
        needed = sorted((n, state) for n, state, _ in edge_list)
        if pending[job_id] == DependencyKind.AFTER_OK:
            never = [n for n, state in needed if state in (JobState.FAILED, JobState.CANCELLED)]
            if never:
                detail = (
                    f"{_jobs_text(never)} ended without succeeding; cancel this job, or "
                    "submit it again without that dependency"
                )
                reasons[job_id] = str(Reason(ReasonCode.DEPENDENCY_NEVER_SATISFIED, detail))
                continue
        waiting = [n for n, state in needed if state not in TERMINAL_STATES]
        if waiting:
            goal = "succeed" if pending[job_id] == DependencyKind.AFTER_OK else "end"
            reasons[job_id] = str(
                Reason(ReasonCode.DEPENDENCY, f"waits for {_jobs_text(waiting)} to {goal}")
            )
            continue
        ends = [end for _, _, end in edge_list if end is not None]
        if ends:
            released[job_id] = max(ends)
    return reasons, released


def array_limit_reasons(rows: list[dict[str, Any]], *, waiting: set[int]) -> dict[int, str]:
    """Pending tasks of capped arrays beyond the cap, with the reason: an array with cap K
    and R tasks holding GPUs offers the policy only its K - R pending tasks of lowest
    index (not held back otherwise, e.g. by a dependency in `waiting`), so no round can
    start more than the cap however many fit.

    Time a task was held so is not waiting: see `RoundContext.wait_restarted`.
    """
    running: dict[int, int] = defaultdict(int)
    pending: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        if row["array_id"] is None or row["array__max_running"] is None:
            continue
        if row["state"] == JobState.PENDING:
            if row["id"] not in waiting:
                pending[row["array_id"]].append((row["array_index"], row["id"]))
        else:  # STARTING, RUNNING, PREEMPTING: holding GPUs
            running[row["array_id"]] += 1
    caps = {row["array_id"]: row["array__max_running"] for row in rows if row["array_id"]}
    reasons: dict[int, str] = {}
    for array_id, tasks in pending.items():
        cap, now_running = caps[array_id], running[array_id]
        # No count of its running tasks: read before this round's starts, it would be
        # stale as soon as the round applied them.
        detail = f"array {array_id} runs at most {cap} task{'s' if cap != 1 else ''} at once"
        for _, job_id in sorted(tasks)[max(cap - now_running, 0) :]:
            reasons[job_id] = str(Reason(ReasonCode.ARRAY_LIMIT, detail))
    return reasons


def _jobs_text(job_ids: list[int]) -> str:
    """Each job as `jobs.selectors.texts_for_viewer` finds it ("job #12, job #13"), so a
    viewer who may not see one reads "another job" there."""
    shown = ", ".join(f"job #{job_id}" for job_id in job_ids[:10])
    more = f" and {len(job_ids) - 10} more" if len(job_ids) > 10 else ""
    return f"{shown}{more}"


@dataclass(frozen=True)
class RoundContext:
    """What the apply step needs to know about the rows the snapshot was built from."""

    pending_reason: dict[int, tuple[str, int | None]]  # job id -> (reason, queue_position)
    attempt: dict[int, int]  # job id -> attempt number, for running jobs
    node_of_device: dict[int, str]
    preempting_devices: dict[int, int]  # device id -> id of the PREEMPTING job holding it
    # Pending jobs left out of the snapshot for a reason the apply step stores (their owner's
    # account is disabled, or they left the job's group): job id -> reason, only where the
    # stored reason differs.
    left_out_reasons: dict[int, str] = field(default_factory=dict)
    # Pending array tasks offered this round that their array's cap held until now: the
    # apply step starts their wait (`pending_since`) now, so the hours the cap held them
    # never count as waiting (the starvation guard, preemption patience).
    wait_restarted: frozenset[int] = frozenset()


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def snapshot_build(*, now: datetime, settings: SchedulerSettings) -> tuple[Snapshot, RoundContext]:
    """Read the cluster's state as of `now` into a frozen Snapshot (and the apply context).

    Every read sees one database snapshot: with separate autocommit queries, a cancel or a
    finish committing between two of them would tear it (its GPUs neither held nor
    stopping, or its service counted both live and in the stored usage). On PostgreSQL a
    REPEATABLE READ transaction; SQLite's transactions are serializable already. Inside a
    caller's transaction the isolation level is that transaction's.
    """
    outermost = not connection.in_atomic_block
    # Read-only: inside a caller's transaction a savepoint would guard nothing.
    with transaction.atomic(savepoint=False):
        if outermost and connection.vendor == "postgresql":
            # Only as the first statement of a transaction this block begins itself.
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _snapshot_read(now=now, settings=settings)


def _snapshot_read(*, now: datetime, settings: SchedulerSettings) -> tuple[Snapshot, RoundContext]:
    """The reads of `snapshot_build`, in order:

    1. Devices (GPUs) with their node, type and speed; nodes with whether they take work.
    2. Live allocations: who holds which device since when.
    3. Active jobs, with the live part of their accounting added; PREEMPTING ones only as
       `stopping_jobs` (busy devices that still count against quotas); pending jobs of
       disabled owners, or of owners who left the job's group, left out, with the reason
       the apply step stores.
    4. The users and groups of those jobs: weights, quotas, decayed usage plus live usage.
    5. Sizes of recently ended jobs, for the Gittins distribution.

    Jobs' speeds per device type (`Job.throughputs`, for AlloX placement) come from their
    measured progress (`agents.selectors.measured_rates`, `scheduler.core.speeds`).
    """
    now_s = now.timestamp()
    half_life = django_settings.GPULAB_USAGE_HALF_LIFE_HOURS * 3600.0

    may_span = jobs_may_span_nodes()  # one node per job wherever real nodes launch them
    # A cordoned GPU is in the snapshot, not schedulable: nothing is placed on it, a job
    # holding it runs on, and a job that would fit with it back in service is held
    # NodeDrained (an admin can act), not TypeUnavailable (change the request).
    device_rows = Device.objects.filter(kind=DeviceKind.GPU).values_list(
        "id", "node__name", "device_type__name", "device_type__speed", "cordoned_at"
    )
    devices = tuple(
        DeviceView(
            id=pk, node=node, device_type=type_name, speed=speed, schedulable=cordoned is None
        )
        for pk, node, type_name, speed, cordoned in device_rows
    )
    speed_of = {device.id: device.speed for device in devices}
    node_of_device = {device.id: device.node for device in devices}
    nodes = tuple(
        NodeView(name=name, schedulable=state == NodeState.UP)
        for name, state in Node.objects.values_list("name", "state")
    )

    stopping = devices_stopping(now=now)  # busy until their old process is confirmed gone

    held: dict[int, list[int]] = defaultdict(list)
    held_since: dict[int, float] = {}
    for job_id, device_id, started_at in Allocation.objects.filter(
        ended_at__isnull=True
    ).values_list("job_id", "device_id", "started_at"):
        held[job_id].append(device_id)
        held_since[job_id] = started_at.timestamp()

    # A failed job waiting out its retry backoff is not schedulable yet: left out, it keeps
    # the reason its failure wrote ("retry 1 of 3 after a 60 s backoff").
    owner_is_member = LabGroup.members.through.objects.filter(
        labgroup_id=OuterRef("group_id"), user_id=OuterRef("owner_id")
    )
    active = (
        Job.objects.filter(state__in=SNAPSHOT_STATES)
        .exclude(state=JobState.PENDING, retry_not_before__gt=now)
        .annotate(
            command_text=argv_text(),
            owner_is_member=Exists(owner_is_member),
            # In the same query: the dependencies themselves are read only for the few
            # pending jobs that have any.
            has_dependencies=Exists(
                Job.depends_on.through.objects.filter(from_job_id=OuterRef("pk"))
            ),
        )
    )
    read = active.values(
        "id", "owner__username", "owner_id", "owner__is_active", "owner_is_member",
        "has_dependencies",
        "group__name", "group_id", "dependency", "array_id", "array_index",
        "array__max_running",
        "num_gpus", "submitted_at", "state", "accepted_types", "consolidation",
        "attained_service", "service_since_promotion", "executed_since_promotion",
        "waiting_since_promotion", "queue_level", "queue_entered_at", "pending_since",
        "retry_not_before", "reason", "queue_position", "attempt", "image", "command_text",
        "interactive", "preempted_for",
    )  # fmt: skip
    # Nor is a pending job whose owner's account is disabled, or whose owner left the
    # job's group: it is left out with a reason of its own for the apply step to store
    # (only where the stored one differs).
    # Nor is a pending job that waits for other jobs (`Job.depends_on`).
    read = list(read)
    waits, released = dependency_reasons(
        {
            row["id"]: row["dependency"]
            for row in read
            if row["state"] == JobState.PENDING and row["has_dependencies"]
        }
    )
    # Nor is an array task past its array's cap on running tasks.
    waits |= array_limit_reasons(read, waiting=set(waits))
    # Tasks held by their array's cap until this round (the reason says so): their wait
    # starts now, however the slot opened (a task ended, was cancelled, or went back to
    # a retry's backoff). The apply step stores it.
    cap_code = f"{ReasonCode.ARRAY_LIMIT}:"
    wait_restarted = {
        row["id"]
        for row in read
        if row["state"] == JobState.PENDING
        and row["id"] not in waits
        and (row["reason"] or "").startswith(cap_code)
    }
    rows: list[dict[str, Any]] = []
    left_out_reasons: dict[int, str] = {}
    for row in read:
        held_why = None
        if row["state"] == JobState.PENDING and not row["owner__is_active"]:
            held_why = OWNER_DISABLED_REASON
        elif row["id"] in waits:
            held_why = waits[row["id"]]
        elif (
            row["state"] == JobState.PENDING
            and row["group_id"] is not None
            and not row["owner_is_member"]
        ):
            held_why = not_a_member_reason(row["group__name"])
        if held_why is not None:
            if row["reason"] != held_why or row["queue_position"] is not None:
                left_out_reasons[row["id"]] = held_why
            continue
        rows.append(row)
    type_speed = {device.device_type: device.speed for device in devices}

    # Jobs of one program share their rates: one conversion per program, not per job.
    speeds_of = functools.cache(lambda rates: relative_speeds(dict(rates), type_speed))

    rates = measured_rates(
        jobs=(
            JobProgram(row["id"], row["image"], row["command_text"], row["num_gpus"])
            for row in rows
            if row["state"] != JobState.PREEMPTING
        ),
        now=now,
    )
    jobs: list[JobView] = []
    busy: set[int] = set(stopping)
    pending_reason: dict[int, tuple[str, int | None]] = {}
    attempt: dict[int, int] = {}
    preempting_devices: dict[int, int] = {}
    stopping_jobs: list[StoppingJob] = []
    live_usage_user: dict[int, float] = defaultdict(float)
    live_usage_group: dict[int, float] = defaultdict(float)
    for row in rows:
        job_id = row["id"]
        state = row["state"]
        if state == JobState.PREEMPTING:
            stopping_devices = tuple(sorted(held.get(job_id, ())))
            for device_id in stopping_devices:
                busy.add(device_id)
                preempting_devices[device_id] = job_id
            # Until it exits it holds its GPUs: they still count against its quotas.
            stopping_jobs.append(
                StoppingJob(
                    id=job_id,
                    user=row["owner__username"],
                    group=row["group__name"],
                    devices=stopping_devices,
                    for_job=row["preempted_for"],
                )
            )
            # Its service is charged only when it leaves its devices: until then it is live
            # usage, as for a running job, or its owner would look idle during the grace.
            usage = _live_usage(
                stopping_devices, held_since.get(job_id), now_s, speed_of, half_life
            )
            live_usage_user[row["owner_id"]] += usage
            if row["group_id"] is not None:
                live_usage_group[row["group_id"]] += usage
            continue
        attained = row["attained_service"]
        since_promotion = row["service_since_promotion"]
        executed = row["executed_since_promotion"]
        waiting = row["waiting_since_promotion"]
        device_ids: tuple[int, ...] = ()
        started_at = None
        pending_since = None
        if state == JobState.PENDING:
            phase = JobPhase.PENDING
            # None only for an odd row; the policy then counts from submission. A retry's
            # backoff is not waiting: the spell starts when the job may start.
            pending_since = _epoch(eligible_since(row["pending_since"], row["retry_not_before"]))
            if pending_since is not None and job_id in released:
                # Held by its dependencies until then (see `dependency_reasons`).
                pending_since = max(pending_since, released[job_id].timestamp())
            if job_id in wait_restarted:
                pending_since = now_s
            # Waiting counts only after the job has run (scheduler.core.accounting).
            if pending_since is not None and executed > 0:
                waiting += max(now_s - pending_since, 0.0)
            pending_reason[job_id] = (row["reason"], row["queue_position"])
        else:
            phase = JobPhase.RUNNING
            device_ids = tuple(sorted(held.get(job_id, ())))
            started_at = held_since.get(job_id, now_s)
            seconds = max(now_s - started_at, 0.0)
            service = live_service(device_ids, started_at, now_s, speed_of)
            attained += service
            since_promotion += service
            executed += seconds
            attempt[job_id] = row["attempt"]
            usage = _live_usage(device_ids, started_at, now_s, speed_of, half_life)
            live_usage_user[row["owner_id"]] += usage
            if row["group_id"] is not None:
                live_usage_group[row["group_id"]] += usage
        jobs.append(
            JobView(
                id=job_id,
                user=row["owner__username"],
                group=row["group__name"],
                num_gpus=row["num_gpus"],
                submit_time=row["submitted_at"].timestamp(),
                phase=phase,
                accepted_types=tuple(row["accepted_types"]),
                consolidation=(
                    Consolidation(row["consolidation"]) if may_span else Consolidation.REQUIRED
                ),
                devices=device_ids,
                attained_service=attained,
                service_since_promotion=since_promotion,
                executed_since_promotion=executed,
                waiting_since_promotion=waiting,
                queue_level=row["queue_level"],
                queue_entered_at=_epoch(row["queue_entered_at"]) or row["submitted_at"].timestamp(),
                started_at=started_at,
                model=row["image"],
                throughputs=speeds_of(rates.get(job_id, ())),
                # A session's state lives in memory: the scheduler never preempts it
                # (jobs.sessions), but for a guarantee it borrows beyond (its walltime and
                # idle reaping end it).
                preemptible=not row["interactive"],
                reclaimable=row["interactive"],
                pending_since=pending_since,
                # Not preemptible until RUNNING (the job state machine): no victim, no mover.
                starting=state == JobState.STARTING,
            )
        )

    user_ids = {row["owner_id"] for row in rows}
    group_ids = {row["group_id"] for row in rows} - {None}
    users = _accounts(User, user_ids, "username", "user_id", live_usage_user, now_s, half_life)
    groups = _accounts(LabGroup, group_ids, "name", "group_id", live_usage_group, now_s, half_life)

    finished_sizes = _finished_job_sizes(limit=1000)
    snapshot = Snapshot(
        now=now_s,
        jobs=tuple(jobs),
        devices=devices,
        nodes=nodes,
        users=users,
        groups=groups,
        settings=settings,
        busy_device_ids=frozenset(busy),
        stopping_jobs=tuple(stopping_jobs),
        finished_job_sizes=finished_sizes,
    )
    context = RoundContext(
        pending_reason=pending_reason,
        attempt=attempt,
        node_of_device=node_of_device,
        preempting_devices=preempting_devices,
        left_out_reasons=left_out_reasons,
        wait_restarted=frozenset(wait_restarted),
    )
    return snapshot, context


def _live_usage(
    device_ids: Iterable[int],
    since: float | None,
    now_s: float,
    speed_of: dict[int, float],
    half_life: float,
) -> float:
    """Fair-share usage, decayed to `now`, of the run on `device_ids` since `since`.

    Each GPU-second decays from when it was used (`decayed_service`), as `_charge_usage`
    (jobs.services) charges the run when it leaves its devices, so an account's usage does
    not jump when a long run ends.
    """
    if since is None:
        return 0.0
    return decayed_service(held_rate(device_ids, speed_of), max(now_s - since, 0.0), half_life)


def _finished_job_sizes(*, limit: int) -> tuple[float, ...]:
    """Attained service of the `limit` jobs that left the system last, oldest first.

    From the scheduler's view a job's size is the service it received before it left, however
    it left: succeeded, failed (a walltime timeout included) or cancelled. Counting only the
    successes would teach the Gittins distribution that jobs are shorter than they are. Jobs
    that never ran (size 0) say nothing about sizes.

    The newest `limit` of each end state, each read from the (state, -finished_at) index
    (one ORDER BY over all three would sort every finished job), then merged here: one
    UNION ALL on PostgreSQL, three queries where a compound query cannot hold a LIMIT.
    """
    per_state = [
        Job.objects.filter(state=state, attained_service__gt=0, finished_at__isnull=False)
        .order_by("-finished_at", "-id")
        .values_list("finished_at", "id", "attained_service")[:limit]
        for state in sorted(TERMINAL_STATES)
    ]
    if connection.features.supports_slicing_ordering_in_compound:
        found = list(per_state[0].union(*per_state[1:], all=True))
    else:
        found = [row for query in per_state for row in query]
    newest = heapq.nlargest(limit, found, key=lambda row: (row[0], row[1]))
    return tuple(size for _, _, size in reversed(newest))


def _accounts(
    model: type[User] | type[LabGroup],
    ids: set[int],
    name_field: str,
    quota_fk: str,
    live_usage: dict[int, float],
    now_s: float,
    half_life: float,
) -> tuple[Account, ...]:
    """Accounts (users or groups) with weights, quotas and usage decayed to `now`."""
    per_type: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for owner_id, type_name, max_gpus in DeviceTypeQuota.objects.filter(
        **{f"{quota_fk}__in": ids}
    ).values_list(quota_fk, "device_type__name", "max_gpus"):
        per_type[owner_id].append((type_name, max_gpus))
    accounts = []
    columns = ["id", name_field, "weight", "usage", "usage_updated_at"]
    columns += ["max_gpus", "max_running_jobs", "max_pending_jobs"]
    if model is LabGroup:
        columns.append("guaranteed_gpus")
    for row in model.objects.filter(pk__in=ids).values(*columns):
        updated = row["usage_updated_at"]
        elapsed = max(now_s - updated.timestamp(), 0.0) if updated else 0.0
        usage = decay_usage(row["usage"], elapsed, half_life) + live_usage.get(row["id"], 0.0)
        accounts.append(
            Account(
                name=row[name_field],
                weight=row["weight"],
                usage=usage,
                quota=Quota(
                    max_gpus=row["max_gpus"],
                    max_running_jobs=row["max_running_jobs"],
                    max_pending_jobs=row["max_pending_jobs"],
                    max_gpus_by_type=tuple(sorted(per_type.get(row["id"], ()))),
                ),
                guaranteed_gpus=row.get("guaranteed_gpus") or 0,
            )
        )
    return tuple(sorted(accounts, key=lambda account: account.name))
