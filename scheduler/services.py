"""A scheduling round: lock → snapshot → decide → apply in one transaction → agents.

`scheduling_round_run` is the only entry point; the Celery task, the embedded demo loop,
the benchmark and the tests all call it.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import LabGroup, User
from cluster.choices import NodeState
from cluster.models import Device, Node
from config.errors import ApplicationError
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_preempt, job_reason_fit, job_start, jobs_time_out
from scheduler.core.types import Decisions, Hold, Preempt, QueueChange, SchedulerSettings, Start
from scheduler.policies import decide

from .choices import RoundOutcome, RoundTrigger
from .locks import round_lock
from .models import SchedulingRound
from .selectors import devices_stopping, scheduler_config_get, scheduler_settings_from
from .snapshot import RoundContext, snapshot_build

logger = logging.getLogger(__name__)


@dataclass
class ApplyResult:
    started: list[tuple[int, int]] = field(default_factory=list)  # (job id, attempt)
    preempted: list[tuple[int, int]] = field(default_factory=list)  # (job id, attempt)
    dropped: list[dict[str, object]] = field(default_factory=list)


def scheduling_round_run(*, trigger: RoundTrigger = RoundTrigger.MANUAL) -> SchedulingRound:
    """Run one round, unless another holds the lock (then record that and return at once).

    1. Take the round lock (PostgreSQL advisory lock).
    2. Fail the jobs whose walltime is used up, then read the stored settings and build
       the snapshot as of now.
    3. `decide(snapshot)`: the configured pure policy, invariant-checked.
    4. Apply every decision in one transaction; one that no longer holds is dropped.
    5. Once the lock is released, and on commit, ask the agents to start and stop work
       (never for uncommitted rows).

    A round that raises is recorded as FAILED with its traceback, and the error re-raised.
    """
    started_at = timezone.now()
    clock = time.perf_counter()
    committed: list[tuple[ApplyResult, int]] = []  # decisions whose apply block ended well
    try:
        with round_lock() as acquired:
            if not acquired:
                logger.info("Scheduling round skipped: another round holds the lock.")
                return SchedulingRound.objects.create(
                    started_at=started_at, trigger=trigger, outcome=RoundOutcome.LOCKED
                )
            try:
                return _round_run_locked(
                    trigger=trigger, started_at=started_at, clock=clock, committed=committed
                )
            except Exception:
                # Recorded (the timer then waits an interval before the next try: see
                # `round_is_due`) and re-raised, so the task fails visibly too.
                _round_failure_record(trigger=trigger, started_at=started_at, clock=clock)
                raise
    finally:
        # Outside the lock: sending a task waits on the broker, and a broker that hangs
        # must not hold up every later round. On commit: at once when the round is its
        # own transaction, at the caller's commit inside one, never after a rollback. A
        # round that failed after its decisions committed still sends them.
        for result, grace in committed:
            # robust: should dispatch still raise, the committed round is recorded anyway.
            # A function, not a functools.partial: Django's robust handler logs the
            # callback's __qualname__, which a partial lacks (its AttributeError would be
            # raised instead of the error it reports).
            def dispatch(result: ApplyResult = result, grace: int = grace) -> None:
                _dispatch_to_agents(result, grace)

            transaction.on_commit(dispatch, robust=True)


def _round_run_locked(
    *,
    trigger: RoundTrigger,
    started_at: datetime,
    clock: float,
    committed: list[tuple[ApplyResult, int]],
) -> SchedulingRound:
    """Steps 2-4 of `scheduling_round_run`, under the round lock; the decisions it
    committed, with the grace for their stops, go into `committed` for step 5."""
    config = scheduler_config_get()
    settings = scheduler_settings_from(config)
    # Under the lock and before the snapshot, so this round already reuses their devices.
    timed_out = jobs_time_out(now=started_at)
    if timed_out:
        logger.info("Walltime exceeded, jobs failed: %s", timed_out)
    snapshot, context = snapshot_build(now=started_at, settings=settings)
    built = time.perf_counter()
    decisions = decide(snapshot)
    decided = time.perf_counter()
    with transaction.atomic():
        result = decisions_apply(decisions=decisions, context=context, now=started_at)
    committed.append((result, config.preemption_grace_seconds))
    applied_clock = time.perf_counter()
    pending = sum(1 for job in snapshot.jobs if not job.is_running)
    held_devices = {d for job in snapshot.jobs for d in job.devices} | snapshot.busy_device_ids
    return SchedulingRound.objects.create(
        started_at=started_at,
        duration_ms=(applied_clock - clock) * 1000,
        trigger=trigger,
        outcome=RoundOutcome.APPLIED,
        policy=settings.policy,
        settings=_settings_record(settings),
        pending_jobs=pending,
        running_jobs=len(snapshot.jobs) - pending,
        free_devices=len(snapshot.devices) - len(held_devices),
        starts=len(result.started),
        preemptions=len(result.preempted),
        holds=len(decisions.holds),
        queue_changes=len(decisions.queue_changes),
        dropped=result.dropped,
        timings_ms={
            "snapshot": round((built - clock) * 1000, 2),
            "decide": round((decided - built) * 1000, 2),
            "apply": round((applied_clock - decided) * 1000, 2),
        },
    )


# The tail of a failed round's traceback kept in its record (the innermost frames).
ROUND_ERROR_CHARS = 8000


def _round_failure_record(*, trigger: RoundTrigger, started_at: datetime, clock: float) -> None:
    """Record the round being handled in an `except` block as FAILED, with its traceback.

    Never raises: a round whose error also broke the database connection (or the
    enclosing transaction) is only logged, and the caller re-raises the original error.
    """
    error = traceback.format_exc()
    logger.error("Scheduling round failed:\n%s", error)
    try:
        SchedulingRound.objects.create(
            started_at=started_at,
            duration_ms=(time.perf_counter() - clock) * 1000,
            trigger=trigger,
            outcome=RoundOutcome.FAILED,
            error=error[-ROUND_ERROR_CHARS:],
        )
    except Exception:
        logger.exception("The failed round could not be recorded.")


def _settings_record(settings: SchedulerSettings) -> dict[str, object]:
    """The settings as stored JSON (tuples become lists, enums their values)."""
    record = asdict(settings)
    record["placement"] = settings.placement.value
    record["queue_thresholds"] = list(settings.queue_thresholds)
    return record


def decisions_apply(*, decisions: Decisions, context: RoundContext, now) -> ApplyResult:  # type: ignore[no-untyped-def]
    """Write a round's decisions; call inside a transaction.

    Every decision is re-checked against the rows by the conditional updates of the
    state machine and, for starts, by the live-allocation unique index. Each runs in its
    own savepoint, so one that no longer holds is dropped (and logged) without undoing
    the others, and never half-applied.
    """
    result = ApplyResult()
    if context.wait_restarted:
        # Offered now after their array's cap held them: their wait starts here (before
        # any start below folds it into the job's accounting).
        Job.objects.filter(pk__in=context.wait_restarted, state=JobState.PENDING).update(
            pending_since=now
        )
    _apply_queue_changes(decisions.queue_changes, now)
    for preemption in decisions.preemptions:
        _apply_preemption(preemption, context, result)
    # Devices of jobs still checkpointing (preempted now or earlier) are not free yet:
    # a start on them waits for the next round instead of failing at the unique index.
    preempting = dict(context.preempting_devices)
    preempted_ids = [job_id for job_id, _ in result.preempted]
    for device_id, job_id in Allocation.objects.filter(
        job_id__in=preempted_ids, ended_at__isnull=True
    ).values_list("device_id", "job_id"):
        preempting[device_id] = job_id
    # Read after the preemptions: a victim cancelled before its preemption ran has let go
    # of its GPUs (the preemption was dropped), but its process may still be running there.
    stopping = devices_stopping(now=now)
    unschedulable = _devices_refusing_starts(
        {d for start in decisions.starts for d in start.device_ids}
    )
    owner_refused = _owners_refusing_starts({start.job_id for start in decisions.starts})
    waiting_reasons: dict[int, str] = {}
    for start in decisions.starts:
        blocker = next((preempting[d] for d in start.device_ids if d in preempting), None)
        if blocker is not None:
            waiting_reasons[start.job_id] = (
                f"WaitingForResources: job #{blocker} is checkpointing before it frees its GPUs"
            )
            continue
        if stopping.intersection(start.device_ids):
            waiting_reasons[start.job_id] = (
                "WaitingForResources: a stopped job's process is still leaving its GPUs"
            )
            continue
        _apply_start(start, unschedulable, owner_refused, result)
    _apply_holds(decisions.holds, waiting_reasons, context)
    return result


def _devices_refusing_starts(device_ids: set[int]) -> set[int]:
    """Of `device_ids`, those no job may start on now: retired, cordoned, gone, or on a
    node not UP.

    On PostgreSQL the rows are locked FOR SHARE until the round commits, nodes first and
    then devices (the order a heartbeat takes them in; it locks only its own node, and a
    drain it makes settles only that node, so neither waits on the other in a cycle). A
    drain or a GPU retirement that committed earlier is read here; one that comes later
    waits for the round and then sees its allocations: `node_drain_settle` leaves the node
    DRAINING, and a heartbeat refuses to retire an allocated GPU. SQLite (the demo) has one
    writer at a time, so a plain read is as good.
    """
    if not device_ids:
        return set()
    ids = sorted(device_ids)
    if connection.vendor == "postgresql":
        node_table, device_table = Node._meta.db_table, Device._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, state FROM {node_table} WHERE id IN "
                f"(SELECT node_id FROM {device_table} WHERE id = ANY(%s)) ORDER BY id FOR SHARE",
                [ids],
            )
            node_state = dict(cursor.fetchall())
            cursor.execute(
                f"SELECT id, node_id, retired_at, cordoned_at FROM {device_table} "
                "WHERE id = ANY(%s) ORDER BY id FOR SHARE",
                [ids],
            )
            rows = cursor.fetchall()
    else:
        rows = list(
            Device.all_objects.filter(pk__in=ids).values_list(
                "id", "node_id", "retired_at", "cordoned_at"
            )
        )
        node_ids = {row[1] for row in rows}
        node_state = dict(Node.objects.filter(pk__in=node_ids).values_list("id", "state"))
    usable = {
        device_id
        for device_id, node_id, retired_at, cordoned_at in rows
        if retired_at is None and cordoned_at is None and node_state.get(node_id) == NodeState.UP
    }
    return device_ids - usable


def _owners_refusing_starts(job_ids: set[int]) -> dict[int, str]:
    """Of `job_ids`, those whose owner may start nothing now, with why: their account
    was disabled, or they left the job's group, after the snapshot was read.

    The snapshot holds such jobs (`scheduler.snapshot`); this closes the window between
    it and the apply. On PostgreSQL the owners' rows, then their memberships of the jobs'
    groups, are locked FOR SHARE until the round commits, after the nodes and devices
    (`_devices_refusing_starts`); an admin's edit of a user's groups locks the same rows
    in the same order, and an edit of a group's members takes no user lock. A disable or
    a removal committed earlier is read here; one that comes later waits for the round,
    and the jobs it started then run on, as running jobs do when an owner is disabled.
    SQLite (the demo) has one writer at a time, so a plain read is as good.
    """
    if not job_ids:
        return {}
    jobs = list(Job.objects.filter(pk__in=job_ids).values_list("id", "owner_id", "group_id"))
    owner_ids = sorted({owner_id for _, owner_id, _ in jobs})
    group_ids = sorted({group_id for _, _, group_id in jobs if group_id is not None})
    membership = LabGroup.members.through
    if connection.vendor == "postgresql":
        user_table, member_table = User._meta.db_table, membership._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, is_active FROM {user_table} WHERE id = ANY(%s) ORDER BY id FOR SHARE",
                [owner_ids],
            )
            active = dict(cursor.fetchall())
            cursor.execute(
                f"SELECT labgroup_id, user_id FROM {member_table} "
                "WHERE labgroup_id = ANY(%s) AND user_id = ANY(%s) ORDER BY id FOR SHARE",
                [group_ids, owner_ids],
            )
            members = set(cursor.fetchall())
    else:
        active = dict(User.objects.filter(pk__in=owner_ids).values_list("id", "is_active"))
        rows = membership.objects.filter(labgroup_id__in=group_ids, user_id__in=owner_ids)
        members = set(rows.values_list("labgroup_id", "user_id"))
    refused: dict[int, str] = {}
    for job_id, owner_id, group_id in jobs:
        if not active.get(owner_id, False):
            refused[job_id] = "its owner's account was disabled"
        elif group_id is not None and (group_id, owner_id) not in members:
            refused[job_id] = "its owner left the job's group"
    return refused


def _apply_preemption(preemption: Preempt, context: RoundContext, result: ApplyResult) -> None:
    try:
        with transaction.atomic():
            job = job_preempt(
                job_id=preemption.job_id, reason=preemption.reason, by_job_id=preemption.by_job_id
            )
    except ApplicationError as exc:
        _drop(result, "preempt", preemption.job_id, str(exc))
        return
    result.preempted.append((job.pk, job.attempt))


def _apply_start(
    start: Start, unschedulable: set[int], owner_refused: dict[int, str], result: ApplyResult
) -> None:
    if unschedulable.intersection(start.device_ids):
        _drop(
            result,
            "start",
            start.job_id,
            "a device was retired or cordoned, or its node stopped taking work",
        )
        return
    if start.job_id in owner_refused:
        _drop(result, "start", start.job_id, owner_refused[start.job_id])
        return
    try:
        job = job_start(job_id=start.job_id, device_ids=start.device_ids)
    except ApplicationError as exc:
        _drop(result, "start", start.job_id, str(exc))
        return
    result.started.append((job.pk, job.attempt))


def _apply_queue_changes(changes: Iterable[QueueChange], now) -> None:  # type: ignore[no-untyped-def]
    """Move jobs between Tiresias queues; a promotion also restarts the since-promotion clocks."""
    by_kind: dict[tuple[int, bool, float | None], list[int]] = {}
    for change in changes:
        key = (change.level, change.promoted, change.entered_at)
        by_kind.setdefault(key, []).append(change.job_id)
    for (level, promoted, entered_at), job_ids in by_kind.items():
        # A running job's demotion carries the moment its service crossed the threshold.
        entered = now if entered_at is None else datetime.fromtimestamp(entered_at, tz=UTC)
        updates: dict[str, object] = {"queue_level": level, "queue_entered_at": entered}
        if promoted:
            updates |= {
                "service_since_promotion": 0.0,
                "executed_since_promotion": 0.0,
                "waiting_since_promotion": 0.0,
                "pending_since": now,
            }
        Job.objects.filter(
            pk__in=job_ids, state__in=(JobState.PENDING, JobState.RUNNING, JobState.STARTING)
        ).update(**updates)


def _apply_holds(
    holds: Iterable[Hold], waiting_reasons: dict[int, str], context: RoundContext
) -> None:
    """Store each held job's reason and queue position, writing only rows that changed."""
    changed: list[tuple[int, str, int | None]] = []
    for hold in holds:
        # Cut as stored, so a long reason compares equal to itself the next round.
        reason = job_reason_fit(waiting_reasons.pop(hold.job_id, None) or str(hold.reason))
        if context.pending_reason.get(hold.job_id) != (reason, hold.position):
            changed.append((hold.job_id, reason, hold.position))
    for job_id, reason in waiting_reasons.items():
        changed.append((job_id, job_reason_fit(reason), None))
    # Jobs the snapshot left out of the policy's view (a disabled owner's) say why.
    for job_id, reason in context.left_out_reasons.items():
        changed.append((job_id, job_reason_fit(reason), None))
    if not changed:
        return
    if connection.vendor == "postgresql":
        from psycopg2.extras import execute_values

        # One statement for thousands of rows; bulk_update's CASE chains are far slower.
        with connection.cursor() as cursor:
            execute_values(
                cursor.cursor,
                "UPDATE jobs_job SET reason = v.reason, queue_position = v.position "
                "FROM (VALUES %s) AS v(id, reason, position) "
                "WHERE jobs_job.id = v.id AND jobs_job.state = 'PENDING'",
                changed,
                template="(%s, %s, %s::integer)",
                page_size=2000,
            )
        return
    jobs = [
        Job(pk=job_id, reason=reason, queue_position=position)
        for job_id, reason, position in changed
    ]
    # The state filter goes into each UPDATE's WHERE: a job cancelled mid-round keeps its
    # own reason and no queue position, as on PostgreSQL.
    Job.objects.filter(state=JobState.PENDING).bulk_update(
        jobs, ["reason", "queue_position"], batch_size=500
    )


def _drop(result: ApplyResult, kind: str, job_id: int, why: str) -> None:
    logger.warning("Dropped %s of job %s: %s", kind, job_id, why)
    result.dropped.append({"decision": kind, "job": job_id, "why": why})


def _dispatch_to_agents(result: ApplyResult, grace_seconds: int) -> None:
    """Ask the agents to stop the preempted attempts and launch the started ones.

    Runs after commit, so the decisions stand whatever happens here: one request that
    fails (a broker blip on `.delay()`, say) is logged and the others are still sent. A
    launch that could not be sent is marked on its job (`launch_undelivered_mark`), and
    the next node poll asks for it again (`undelivered_launches_request`); a lost stop
    is asked for again once its job has been PREEMPTING too long (`attempts_overdue`).
    """
    from agents.services import agent_launch_request, agent_stop_request, launch_undelivered_mark

    for job_id, attempt in result.preempted:
        try:
            agent_stop_request(job_id=job_id, attempt=attempt, grace_seconds=grace_seconds)
        except Exception:
            logger.exception("Stop request for job %s attempt %s failed.", job_id, attempt)
    for job_id, attempt in result.started:
        try:
            agent_launch_request(job_id=job_id, attempt=attempt)
        except Exception:
            logger.exception("Launch request for job %s attempt %s failed.", job_id, attempt)
            launch_undelivered_mark(job_id=job_id, attempt=attempt)


def scheduling_rounds_prune(*, now: datetime, keep_days: int) -> int:
    """Delete the round records older than `keep_days`; returns how many went.

    Rounds are history for the dashboard and debugging: nothing refers to them (no
    foreign key), and with a round every 10 s they add up to 260,000 rows a month.
    """
    deleted, _ = SchedulingRound.objects.filter(
        started_at__lt=now - timedelta(days=keep_days)
    ).delete()
    return deleted
