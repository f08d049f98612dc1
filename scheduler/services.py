"""A scheduling round: lock → snapshot → decide → apply in one transaction → agents.

`scheduling_round_run` is the only entry point; the Celery task, the embedded demo loop,
the benchmark and the tests all call it.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
import traceback
from collections import defaultdict
from collections.abc import Iterable, Sequence
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
from scheduler.core.types import (
    Decisions,
    Preempt,
    QueueChange,
    ReasonCode,
    SchedulerSettings,
    Start,
)
from scheduler.policies import decide
from scheduler.policies.base import QUOTA_NARROWING

from .choices import RoundOutcome, RoundTrigger
from .locks import round_lock
from .models import SchedulingRound
from .selectors import devices_stopping, scheduler_config_get, scheduler_settings_from
from .snapshot import OWNER_DISABLED_REASON, RoundContext, not_a_member_reason, snapshot_build

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
        # Not held and in service: a cordoned GPU is in the snapshot (for the reasons a
        # job is held), but free for nobody.
        free_devices=sum(
            1 for device in snapshot.devices if device.schedulable and device.id not in held_devices
        ),
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
    # Claimant -> the victim whose preemption for it was refused (not RUNNING any more).
    refused_for: dict[int, int] = {}
    for preemption in decisions.preemptions:
        if not _apply_preemption(preemption, context, result) and preemption.by_job_id:
            refused_for[preemption.by_job_id] = preemption.job_id
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
    # Starts that did not happen, with why: these jobs are held after all, and say so.
    held_back: dict[int, str] = {}
    left_out = dict(context.left_out_reasons)
    for start in decisions.starts:
        blockers = sorted({preempting[d] for d in start.device_ids if d in preempting})
        if blockers:
            held_back[start.job_id] = _checkpointing_reason(blockers)
            continue
        if stopping.intersection(start.device_ids):
            held_back[start.job_id] = (
                "WaitingForResources: a stopped job's process is still leaving its GPUs"
            )
            continue
        if start.job_id in owner_refused:
            why, reason = owner_refused[start.job_id]
            _drop(result, "start", start.job_id, why)
            # Out of the queue, as the next snapshot leaves it (`left_out_reasons`).
            left_out[start.job_id] = reason
            continue
        # Positional arguments: a test wraps it as `(*args)` to act between starts.
        why = _apply_start(start, unschedulable, refused_for.get(start.job_id), result)
        if why is not None:
            held_back[start.job_id] = why
    _apply_holds(decisions, held_back, left_out, context)
    return result


def _checkpointing_reason(victims: Sequence[int], *, after: str = "") -> str:
    """Why a job waits for GPUs that jobs preempted for it are still checkpointing on.

    Each job is named "job #N", the form `jobs.selectors.texts_for_viewer` turns into
    "another job" for a viewer who may not see it. `after`: the policy's reason's own
    addition (what a per-type quota rules out), kept.
    """
    named = [f"job #{victim}" for victim in victims]
    if len(named) == 1:
        text = f"{named[0]} is checkpointing before it frees its GPUs"
    else:
        text = (
            f"{', '.join(named[:-1])} and {named[-1]} are checkpointing before they free their GPUs"
        )
    return f"WaitingForResources: {text}{after}"


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


def _owners_refusing_starts(job_ids: set[int]) -> dict[int, tuple[str, str]]:
    """Of `job_ids`, those whose owner may start nothing now, with why and the reason to
    hold them by (the snapshot's own): their account was disabled, or they left the
    job's group, after the snapshot was read.

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
    jobs = list(
        Job.objects.filter(pk__in=job_ids).values_list("id", "owner_id", "group_id", "group__name")
    )
    owner_ids = sorted({owner_id for _, owner_id, _, _ in jobs})
    group_ids = sorted({group_id for _, _, group_id, _ in jobs if group_id is not None})
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
    refused: dict[int, tuple[str, str]] = {}
    for job_id, owner_id, group_id, group_name in jobs:
        if not active.get(owner_id, False):
            refused[job_id] = ("its owner's account was disabled", OWNER_DISABLED_REASON)
        elif group_id is not None and (group_id, owner_id) not in members:
            refused[job_id] = ("its owner left the job's group", not_a_member_reason(group_name))
    return refused


def _apply_preemption(preemption: Preempt, context: RoundContext, result: ApplyResult) -> bool:
    """Preempt one job; False when it no longer may be (it left RUNNING meanwhile)."""
    try:
        with transaction.atomic():
            job = job_preempt(
                job_id=preemption.job_id, reason=preemption.reason, by_job_id=preemption.by_job_id
            )
    except ApplicationError as exc:
        _drop(result, "preempt", preemption.job_id, str(exc))
        return False
    result.preempted.append((job.pk, job.attempt))
    return True


def _apply_start(
    start: Start, unschedulable: set[int], refused_victim: int | None, result: ApplyResult
) -> str | None:
    """Start one job; when that no longer holds, drop it and return the reason to hold it
    by. `refused_victim`: the job preempted for it whose preemption was refused."""
    if unschedulable.intersection(start.device_ids):
        _drop(
            result,
            "start",
            start.job_id,
            "a device was retired or cordoned, or its node stopped taking work",
        )
        return (
            "WaitingForResources: a GPU chosen for it was retired or cordoned, or its node "
            "stopped taking work; the next round places it again"
        )
    try:
        job = job_start(job_id=start.job_id, device_ids=start.device_ids)
    except ApplicationError as exc:
        _drop(result, "start", start.job_id, str(exc))
        if not Job.objects.filter(pk=start.job_id, state=JobState.PENDING).exists():
            # It left the queue meanwhile (cancelled): no hold, and no place in the queue
            # (the jobs behind it would each show one place too late).
            return None
        # Most often a chosen GPU is still held: by the victim that could not be preempted
        # for it, or by a job that took it first.
        if refused_victim is not None:
            return _victim_refused_reason(refused_victim)
        return (
            "WaitingForResources: a GPU chosen for it was taken before it could start; "
            "the next round places it again"
        )
    result.started.append((job.pk, job.attempt))
    return None


def _victim_refused_reason(victim: int) -> str:
    """Why a job waits whose victim could not be preempted for it: the victim left
    RUNNING after the snapshot (finished, failed, lost) or had not reached it yet."""
    state = Job.objects.filter(pk=victim).values_list("state", flat=True).first()
    now_is = f"it is {JobState(state).label.lower()}" if state else "it is gone"
    return (
        f"WaitingForResources: job #{victim} could not be preempted for it ({now_is}); "
        "the next round decides again"
    )


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
    decisions: Decisions,
    held_back: dict[int, str],
    left_out: dict[int, str],
    context: RoundContext,
) -> None:
    """Store each held job's reason and queue position, writing only rows that changed.

    The held jobs are the policy's holds and the starts the apply step held back
    (`held_back`, job id -> reason), numbered together in the policy's order: a start
    that waits for a checkpoint is usually the next job to run, and a queue without it
    would list it last (no position) and every job behind it one place too early.
    """
    reasons = {hold.job_id: str(hold.reason) for hold in decisions.holds}
    # A job that jobs preempted for it are still checkpointing for: the policy's generic
    # "needs N × GPU" would hide that it is next, so say which jobs it waits for, every
    # round of their grace period (the round that preempted them says so in `held_back`).
    waiting = {
        hold.job_id
        for hold in decisions.holds
        if hold.reason.code == ReasonCode.WAITING_FOR_RESOURCES
    }
    victims: dict[int, list[int]] = defaultdict(list)
    if waiting:
        # Few rows (jobs in their grace period), matched here rather than by a long IN list.
        for claimant, victim in Job.objects.filter(
            state=JobState.PREEMPTING, preempted_for__isnull=False
        ).values_list("preempted_for", "pk"):
            if claimant in waiting:
                victims[claimant].append(victim)
    for claimant, stopping in victims.items():
        _, quota_part, rest = reasons[claimant].partition(QUOTA_NARROWING)
        after = f"{QUOTA_NARROWING}{rest}" if quota_part else ""
        reasons[claimant] = _checkpointing_reason(sorted(stopping), after=after)
    reasons |= held_back
    changed: list[tuple[int, str, int | None]] = []
    for position, job_id in enumerate(_held_in_order(decisions, held_back), start=1):
        # Cut as stored, so a long reason compares equal to itself the next round.
        reason = job_reason_fit(reasons[job_id])
        if context.pending_reason.get(job_id) != (reason, position):
            changed.append((job_id, reason, position))
    # Jobs the snapshot left out of the policy's view (a disabled owner's), or whose owner
    # was disabled since, say why.
    for job_id, reason in left_out.items():
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


def _held_in_order(decisions: Decisions, held_back: Iterable[int]) -> list[int]:
    """The held jobs in queue order: the policy's holds by their positions, and each
    held-back start placed before the first hold the policy ranked below it
    (`Decisions.order`). A start the policy did not rank goes first: it was chosen over
    every job held."""
    rank = {job_id: index for index, job_id in enumerate(decisions.order)}
    holds = [hold.job_id for hold in sorted(decisions.holds, key=lambda hold: hold.position)]
    unranked = len(rank)
    # The highest rank up to each hold: the first hold ranked below a start is the first
    # place where this exceeds the start's rank (holds need not follow `order` exactly).
    highest = list(itertools.accumulate((rank.get(j, unranked) for j in holds), max))
    before: dict[int, list[int]] = defaultdict(list)  # hold index -> starts in front of it
    for job_id in sorted(held_back, key=lambda job_id: rank.get(job_id, -1)):
        before[bisect.bisect_right(highest, rank.get(job_id, -1))].append(job_id)
    ordered: list[int] = []
    for index, job_id in enumerate(holds):
        ordered += before.pop(index, [])
        ordered.append(job_id)
    ordered += before.pop(len(holds), [])
    return ordered


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
