"""Every write to a job: submission, cancellation, and the state machine's transitions.

The transitions table lives in `jobs/choices.py`; this module is the only code that
changes `Job.state`. Each transition is a conditional UPDATE on the expected old state,
so when two workers race for the same job exactly one wins and the other gets
`IllegalTransition`. Each transition writes a `JobEvent` in the same transaction.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import LabGroup, User
from cluster import selectors as cluster_selectors
from config.errors import ApplicationError, IllegalTransition, NotFound, ValidationFailed
from scheduler.core.accounting import decay_usage, decayed_service, eligible_since
from scheduler.triggers import round_request_on_commit

from . import sessions, validation
from .choices import (
    HOLDING_STATES,
    NOTIFY_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Consolidation,
    DependencyKind,
    EventActor,
    JobState,
    Notify,
)
from .models import Allocation, Job, JobArray, JobEvent
from .notifications import job_notify_request
from .selectors import (
    job_get_for_user,
    job_has_run_before,
    job_run_seconds,
    job_visible_to,
    jobs_dependable_by,
)
from .webhooks import WEBHOOK_STATES, job_webhook_request


@dataclass(frozen=True)
class JobSpec:
    """A submission as it arrives from the form, the API or the CLI (not yet validated)."""

    image: Any
    command: Any
    num_gpus: Any = 1
    name: Any = ""
    env: Any = field(default_factory=dict)
    accepted_types: Any = field(default_factory=list)
    consolidation: Any = Consolidation.PREFERRED.value
    walltime_seconds: Any = None
    max_retries: Any = 0
    group: Any = None  # group name; None = the owner's default group
    depends_on: Any = field(default_factory=list)  # ids of jobs of the owner's to wait for
    dependency: Any = DependencyKind.AFTER_OK.value
    notify: Any = ""  # email the owner: "", "end", "fail" or "all" (Slurm's --mail-type)
    array_size: Any = None  # N: submit N tasks, GPULAB_ARRAY_INDEX 0..N-1 (Slurm's --array)
    array_max_running: Any = None  # at most this many tasks hold GPUs at once; None: no cap
    interactive: Any = False  # a session (jobs.sessions): not preempted, bounded, a port


# --------------------------------------------------------------------------- submission


def job_submit(*, owner: User, spec: JobSpec) -> Job:
    """Validate a submission and store it as PENDING, or raise and write nothing.

    1. Syntax of every field (image, argv, env, numbers, choices).
    2. Rules that need the database: the group is one of the owner's, device types exist,
       the cluster could ever give this many GPUs of the accepted types, the owner's and
       the group's hard GPU caps, and the pending-job quotas.
    3. Insert the job and its first event; ask for a scheduling round after commit.

    The owner's (and group's) row is locked for the pending-quota count, so two
    concurrent submissions cannot both slip under the limit.
    """
    errors: dict[str, list[str]] = {}

    def check(field_name: str, messages: list[str]) -> None:
        if messages:
            errors.setdefault(field_name, []).extend(messages)

    check("image", validation.image_errors(spec.image))
    check("command", validation.command_errors(spec.command))
    check("env", validation.env_errors(spec.env))
    # At least one GPU: a job launches on the node of its devices, so a job without any
    # would be started with nowhere to run and sit in STARTING for ever.
    check(
        "num_gpus",
        validation.integer_errors(spec.num_gpus, minimum=1, maximum=validation.MAX_GPUS_PER_JOB),
    )
    check(
        "max_retries",
        validation.integer_errors(spec.max_retries, minimum=0, maximum=validation.MAX_RETRIES),
    )
    if spec.walltime_seconds is not None:
        check(
            "walltime_seconds",
            validation.integer_errors(
                spec.walltime_seconds, minimum=60, maximum=validation.MAX_WALLTIME_SECONDS
            ),
        )
    if spec.consolidation not in Consolidation.values:
        check("consolidation", [f"Choose one of: {', '.join(Consolidation.values)}."])
    interactive = spec.interactive
    if not isinstance(interactive, bool):
        check("interactive", ["Must be true or false."])
        interactive = False
    consolidation, walltime = spec.consolidation, spec.walltime_seconds
    if interactive:
        consolidation, walltime = sessions.session_rules(spec, check)
    name = spec.name if spec.name not in (None, "") else None
    if name is not None and (not isinstance(name, str) or len(name) > validation.MAX_NAME_LENGTH):
        check("name", [f"At most {validation.MAX_NAME_LENGTH} characters of text."])
    check(
        "accepted_types",
        validation.accepted_types_errors(
            spec.accepted_types, cluster_selectors.device_type_names()
        ),
    )
    group = _resolve_group(owner=owner, group_name=spec.group, errors=errors)
    if spec.array_size is not None:
        check(
            "array_size",
            validation.integer_errors(
                spec.array_size, minimum=1, maximum=validation.MAX_ARRAY_SIZE
            ),
        )
    if spec.array_max_running is not None:
        if spec.array_size is None:
            check("array_max_running", ["Give array_size too: it caps an array's tasks."])
        else:
            check(
                "array_max_running",
                validation.integer_errors(
                    spec.array_max_running, minimum=1, maximum=validation.MAX_ARRAY_SIZE
                ),
            )
    if spec.notify not in Notify.values:
        check("notify", [f"Choose one of: {', '.join(v for v in Notify.values if v)}, or empty."])
    elif spec.notify and not owner.email:
        check("notify", ["Your account has no email address; ask an admin to add one."])
    check("depends_on", validation.dependency_ids_errors(spec.depends_on))
    if spec.dependency not in DependencyKind.values:
        check("dependency", [f"Choose one of: {', '.join(DependencyKind.values)}."])
    elif "depends_on" not in errors:
        check("depends_on", _dependency_errors(owner, spec.depends_on, spec.dependency))

    # Capacity and GPU caps need a valid count and valid types; report them alongside
    # the other fields' errors so one round trip shows everything that is wrong.
    num_gpus = spec.num_gpus
    single_node = (
        consolidation == Consolidation.REQUIRED or not cluster_selectors.jobs_may_span_nodes()
    )
    countable = not ({"num_gpus", "accepted_types", "consolidation"} & errors.keys())
    if countable and num_gpus > 0:
        most = cluster_selectors.max_gpus_grantable(
            accepted_types=spec.accepted_types, single_node=single_node
        )
        if num_gpus > most:
            where = "on one node" if single_node else "in the whole cluster"
            types = ", ".join(spec.accepted_types) or "any type"
            check(
                "num_gpus",
                [
                    f"{num_gpus} GPUs can never be granted: at most {most} of one type "
                    f"({types}) exist {where}."
                ],
            )
        for account, label in ((owner, f"user {owner.username}"), (group, f"group {group}")):
            if account is not None and account.max_gpus is not None and num_gpus > account.max_gpus:
                check(
                    "num_gpus", [f"QuotaExceeded: {label} may use at most {account.max_gpus} GPUs."]
                )
    if errors:
        raise ValidationFailed(errors)

    size = spec.array_size or 1
    with transaction.atomic():
        _check_pending_quota(owner=owner, group=group, adding=size)
        now = timezone.now()
        array = None
        if spec.array_size is not None:
            array = JobArray.objects.create(
                owner=owner, size=size, max_running=spec.array_max_running
            )
        base_name = name or _default_name(spec.command)
        jobs = Job.objects.bulk_create(
            Job(
                owner=owner,
                group=group,
                name=base_name if array is None else _task_name(base_name, index),
                image=spec.image,
                command=list(spec.command),
                env=dict(spec.env),
                num_gpus=num_gpus,
                accepted_types=list(spec.accepted_types),
                consolidation=consolidation,
                walltime_seconds=walltime,
                max_retries=spec.max_retries,
                interactive=interactive,
                session_token=sessions.session_token_new() if interactive else "",
                dependency=spec.dependency,
                notify=spec.notify,
                array=array,
                array_index=None if array is None else index,
                state=JobState.PENDING,
                reason="Waiting for the next scheduling round.",
                queue_entered_at=now,
                pending_since=now,
            )
            for index in range(size)
        )
        task_of = "" if array is None else f" task {{index}} of array {array.pk} ({size} tasks)"
        JobEvent.objects.bulk_create(
            JobEvent(
                job=job,
                to_state=JobState.PENDING,
                actor=EventActor.USER,
                actor_user=owner,
                message=f"Submitted{task_of.format(index=index)}: {num_gpus} GPU(s), "
                f"image {job.image}.",
            )
            for index, job in enumerate(jobs)
        )
        if spec.depends_on:
            Job.depends_on.through.objects.bulk_create(
                Job.depends_on.through(from_job_id=job.pk, to_job_id=needed)
                for job in jobs
                for needed in spec.depends_on
            )
        round_request_on_commit()
    return jobs[0]


def _task_name(base: str, index: int) -> str:
    """`name[3]`, Slurm's way of naming an array task, within the name's column."""
    suffix = f"[{index}]"
    return base[: validation.MAX_NAME_LENGTH - len(suffix)] + suffix


def _dependency_errors(owner: User, job_ids: list[int], kind: str) -> list[str]:
    """Why jobs `job_ids` cannot be waited for: not the owner's (an admin may wait for
    anyone's), or, for afterok, already failed or cancelled, so never to succeed."""
    if not job_ids:
        return []
    dependable = jobs_dependable_by(user=owner).filter(pk__in=job_ids)
    state_of = dict(dependable.values_list("pk", "state"))
    errors = []
    missing = [job_id for job_id in job_ids if job_id not in state_of]
    if missing:
        errors.append(f"No job {', '.join(map(str, missing))} of yours.")
    if kind == DependencyKind.AFTER_OK:
        never = [
            f"{job_id} ({state_of[job_id].lower()})"
            for job_id in job_ids
            if state_of.get(job_id) in (JobState.FAILED, JobState.CANCELLED)
        ]
        if never:
            which = f"Job {never[0]} has" if len(never) == 1 else f"Jobs {', '.join(never)} have"
            errors.append(
                f"{which} ended without succeeding, so this job would never start; "
                "use afterany to run after it all the same."
            )
    return errors


def _resolve_group(
    *, owner: User, group_name: Any, errors: dict[str, list[str]]
) -> LabGroup | None:
    if group_name in (None, ""):
        # The default group is an admin's pointer that membership edits do not update:
        # charge it only while the owner still belongs to it (Slurm's default account
        # must be one of the user's associations).
        member_of = owner.lab_groups.order_by("name")
        if owner.default_group_id is not None:
            default = member_of.filter(pk=owner.default_group_id).first()
            if default is not None:
                return default
        return member_of.first()
    if not isinstance(group_name, str):
        errors.setdefault("group", []).append("Give the group's name.")
        return None
    group = owner.lab_groups.filter(name=group_name).first()
    if group is None:
        errors.setdefault("group", []).append(
            f"You are not a member of a group named {group_name!r}."
        )
    return group


def _check_pending_quota(*, owner: User, group: LabGroup | None, adding: int = 1) -> None:
    """Refuse a submission of `adding` jobs past the owner's or the group's
    max_pending_jobs (an array counts every task).

    The owner's row (and the group's) is locked first, so that concurrent submissions
    are counted one after another instead of all seeing the same count. FOR NO KEY UPDATE,
    not FOR UPDATE: foreign-key checks (inserting a job or event that names this user)
    take KEY SHARE locks, which FOR UPDATE would block and deadlock against.
    """
    checks: list[tuple[str, int | None, dict[str, Any]]] = []
    locked_owner = User.objects.select_for_update(no_key=True).get(pk=owner.pk)
    checks.append((f"user {owner.username}", locked_owner.max_pending_jobs, {"owner": owner}))
    if group is not None:
        locked_group = LabGroup.objects.select_for_update(no_key=True).get(pk=group.pk)
        checks.append((f"group {group.name}", locked_group.max_pending_jobs, {"group": group}))
    for label, limit, scope in checks:
        if limit is None:
            continue
        pending = Job.objects.filter(state=JobState.PENDING, **scope).count()
        if pending + adding > limit:
            message = f"QuotaExceeded: {label} already has {pending} pending jobs (max {limit})."
            if adding > 1:
                message = message[:-1] + f"; this array adds {adding}."
            raise ValidationFailed({"quota": [message]})


def _default_name(command: Sequence[str]) -> str:
    return shlex.join(command)[: validation.MAX_NAME_LENGTH]


# --------------------------------------------------------------------------- transitions

REASON_MAX_LENGTH = Job._meta.get_field("reason").max_length


def job_reason_fit(reason: str) -> str:
    """`reason` cut to fit `Job.reason`, its end marked "…".

    Reasons quote what failed (a refused launch, a node's stderr), which may be longer
    than the column: PostgreSQL would refuse the whole transition, and a launch that could
    not record its failure left the job STARTING on its GPUs for ever. The event keeps the
    whole text.
    """
    if len(reason) <= REASON_MAX_LENGTH:
        return reason
    return f"{reason[: REASON_MAX_LENGTH - 1]}…"


def job_transition(
    *,
    job_id: int,
    to_state: JobState,
    actor: EventActor,
    actor_user: User | None = None,
    message: str = "",
    expected: frozenset[JobState] | None = None,
    at_attempt: int | None = None,
    process_gone: bool = True,
    **updates: Any,
) -> Job:
    """Move one job to `to_state` if the state machine allows it from where it is now.

    1. Read the current state; refuse a transition the table does not allow (or one
       outside `expected`, when the caller needs a specific source state; or, with
       `at_attempt`, when the job is on another attempt: a report about attempt 3 must
       not end attempt 4).
    2. Fold the time that just ended into the job's accounting (see `_accounting_updates`).
    3. UPDATE ... WHERE state = <the state just read>: if another worker changed the job
       in between, no row matches and this call raises instead of overwriting.
    4. Leaving a device-holding state ends the job's live allocations and charges the
       service to the owner's and the group's fair-share usage. Unless `process_gone`
       is false (a cancel or a time-out: the process may still run until the node poll
       stops it), the devices are released at once.
    5. Write the event. All in one transaction.
    """
    with transaction.atomic():
        row = Job.objects.filter(pk=job_id).values(
            "state",
            "notify",
            "array_id",
            "attempt",
            "pending_since",
            "retry_not_before",
            "owner_id",
            "group_id",
            "executed_since_promotion",
        )
        current = row.first()
        if current is None:
            raise NotFound(f"Job {job_id} does not exist.")
        if at_attempt is not None and current["attempt"] != at_attempt:
            raise IllegalTransition(
                f"Job {job_id} is on attempt {current['attempt']}, not {at_attempt}; "
                f"{to_state.label} not applied."
            )
        from_state = JobState(current["state"])
        if to_state not in TRANSITIONS[from_state] or (
            expected is not None and from_state not in expected
        ):
            raise IllegalTransition(
                f"Job {job_id} is {from_state.label}; it cannot become {to_state.label}."
            )
        now = timezone.now()
        if "reason" in updates:
            updates["reason"] = job_reason_fit(updates["reason"])
        if to_state in TERMINAL_STATES:
            updates.setdefault("finished_at", now)
        if from_state == JobState.PENDING and to_state != JobState.PENDING:
            # Rounds write positions on PENDING rows only: one left on a job that leaves
            # the queue (cancelled, started) would be shown as its place for ever.
            updates.setdefault("queue_position", None)
        if from_state == JobState.PREEMPTING:
            updates.setdefault("preempted_for", None)  # its GPUs are no longer on their way
        if from_state == JobState.RUNNING and to_state != JobState.RUNNING:
            # An idle warning is about this run (jobs.idle_services): the next run is
            # judged afresh, and a page never shows a deadline that no longer applies.
            updates.setdefault("idle_warned_at", None)
            updates.setdefault("idle_judged_from", None)
        service, accounting = _accounting_updates(
            job_id=job_id, from_state=from_state, to_state=to_state, current=current, now=now
        )
        changed = Job.objects.filter(
            pk=job_id, state=from_state, attempt=current["attempt"]
        ).update(state=to_state, updated_at=now, **accounting, **updates)
        if changed != 1:
            raise IllegalTransition(
                f"Job {job_id} changed state concurrently; {to_state.label} not applied."
            )
        if from_state in HOLDING_STATES and to_state not in HOLDING_STATES:
            Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).update(
                ended_at=now, released_at=now if process_gone else None
            )
            if service > 0:
                _charge_usage(User, current["owner_id"], service, now)
                if current["group_id"] is not None:
                    _charge_usage(LabGroup, current["group_id"], service, now)
        JobEvent.objects.create(
            job_id=job_id,
            from_state=from_state,
            to_state=to_state,
            actor=actor,
            actor_user=actor_user,
            message=message,
        )
        if _mail_wanted(job_id, to_state, notify=current["notify"], array_id=current["array_id"]):
            # After commit: no mail about a change that rolled back. A function, not a
            # functools.partial, for Django's robust handler (see scheduler.services).
            def notify(job_id: int = job_id, state: str = to_state) -> None:
                job_notify_request(job_id=job_id, state=state)

            transaction.on_commit(notify, robust=True)
        if current["group_id"] is not None and to_state in WEBHOOK_STATES:
            # The group's chat, whatever `notify` says; its URL is read after commit.
            def post(job_id: int = job_id, state: str = to_state) -> None:
                job_webhook_request(job_id=job_id, state=state)

            transaction.on_commit(post, robust=True)
        return Job.objects.get(pk=job_id)


def _mail_wanted(job_id: int, to_state: JobState, *, notify: str, array_id: int | None) -> bool:
    """Whether the owner's mail about the job reaching `to_state` is to be asked for (after
    the transition's event is written: the history includes this run).

    An array is mailed once, as a whole, when its last task has ended, and the "fail" rule
    is applied to the tally of all its tasks (jobs.notifications._array_summary): every
    task's end asks, or a failed task that did not end last would never be mailed about.
    A start is mailed the first time the job runs only, as the group's chat is told
    (jobs.webhooks): under LAS a job is resumed many times, and its end says how it went.
    """
    if array_id is not None:
        return bool(notify) and to_state in TERMINAL_STATES
    if to_state not in NOTIFY_STATES[notify]:
        return False
    return to_state != JobState.RUNNING or not job_has_run_before(job_id)


def _accounting_updates(
    *, job_id: int, from_state: JobState, to_state: JobState, current: dict[str, Any], now: Any
) -> tuple[float, dict[str, Any]]:
    """The Tiresias counters to add as the job leaves `from_state` for `to_state`.

    Time is folded in at transitions rather than by a periodic job: while PENDING the
    live part is `now - eligible_since` (the pending spell, a retry's backoff left out),
    while holding devices it is `now - started_at` of the live allocations. Both are
    committed with the transition, so a restart of every process loses no service
    (scheduler/snapshot.py adds the live parts when it reads, from the same functions).
    Service is normalized GPU-seconds: Σ over held devices of type speed × seconds held.
    Returns (the fair-share usage to charge, field updates): the run's service with each
    GPU-second decayed from when it was used to `now` (`decayed_service`, algorithms.md §2).
    """
    updates: dict[str, Any] = {}
    usage = 0.0
    # Like the Tiresias reference (`last_pending_time`), waiting counts towards starvation
    # promotion only after the job has run; see scheduler.core.accounting.advance_pending.
    has_run = current["executed_since_promotion"] > 0
    if from_state == JobState.PENDING and current["pending_since"] is not None and has_run:
        since = eligible_since(current["pending_since"], current["retry_not_before"])
        waited = max((now - since).total_seconds(), 0.0)
        updates["waiting_since_promotion"] = F("waiting_since_promotion") + waited
    if to_state == JobState.PENDING:
        updates["pending_since"] = now
    elif from_state == JobState.PENDING:
        updates["pending_since"] = None
    if from_state in HOLDING_STATES and to_state not in HOLDING_STATES:
        held = Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).values_list(
            "started_at", "device__device_type__speed"
        )
        seconds = 0.0
        service = 0.0
        half_life = settings.GPULAB_USAGE_HALF_LIFE_HOURS * 3600.0
        for started_at, speed in held:
            seconds = max((now - started_at).total_seconds(), 0.0)  # one gang: one interval
            service += speed * seconds
            usage += decayed_service(speed, seconds, half_life)
        if held:
            updates["attained_service"] = F("attained_service") + service
            updates["service_since_promotion"] = F("service_since_promotion") + service
            updates["executed_since_promotion"] = F("executed_since_promotion") + seconds
            updates["total_run_seconds"] = F("total_run_seconds") + seconds
    return usage, updates


def _charge_usage(model: type[User] | type[LabGroup], pk: int, usage: float, now: Any) -> None:
    """Add a run's `usage` to an account's decayed fair-share usage (algorithms.md §2).

    `usage` is already decayed to `now` (`_accounting_updates`), the moment the stored usage
    is decayed to here and then referenced to (`usage_updated_at`).
    """
    account = (
        model.objects.select_for_update(no_key=True).only("usage", "usage_updated_at").get(pk=pk)
    )
    elapsed = (now - account.usage_updated_at).total_seconds() if account.usage_updated_at else 0.0
    half_life = settings.GPULAB_USAGE_HALF_LIFE_HOURS * 3600.0
    account.usage = decay_usage(account.usage, max(elapsed, 0.0), half_life) + usage
    account.usage_updated_at = now
    account.save(update_fields=["usage", "usage_updated_at"])


CANCEL_TRIES = 3


def job_cancel(*, job_id: int, by: User) -> Job:
    """Cancel a job the caller may see (their own; a coordinator: their groups'; admins: any).
    Already-ended jobs stay."""
    # A round or an agent may move the job between the read and the update (a round
    # starting it, say): read again and retry rather than tell the user to.
    tries = 0
    while True:
        job = job_get_for_user(user=by, job_id=job_id)
        if job.state in TERMINAL_STATES:
            raise IllegalTransition(f"Job {job.pk} already ended ({job.get_state_display()}).")
        who = _canceller(by, job)
        try:
            cancelled = job_transition(
                job_id=job.pk,
                to_state=JobState.CANCELLED,
                actor=EventActor.USER,
                actor_user=by,
                message=f"Cancelled by {who} ({by.username}).",
                reason=f"Cancelled by {by.username}.",
                expected=frozenset({job.state}),
                process_gone=job.state == JobState.PENDING,
            )
        except IllegalTransition:
            tries += 1
            if tries == CANCEL_TRIES:
                raise
            continue
        round_request_on_commit()  # its GPUs are free now (or once the poll has stopped it)
        return cancelled


def _canceller(by: User, job: Job) -> str:
    """Who cancelled, as the job's history says it: its owner, an admin, or a coordinator
    of its group (job_visible_to lets no one else)."""
    if by.pk == job.owner_id:
        return "its owner"
    if by.is_lab_admin:
        return "an admin"
    return f"a coordinator of group {job.group.name}" if job.group else "a coordinator"


def job_start(*, job_id: int, device_ids: Sequence[int], message: str = "") -> Job:
    """PENDING → STARTING: hold `device_ids` for a new attempt, or raise and hold nothing.

    The partial unique index on live allocations is the last guard: if any device is
    already held, the INSERT fails and the whole transition rolls back. Kept to a few
    statements, because a round that fills an empty cluster calls it hundreds of times.
    """
    if len(set(device_ids)) != len(device_ids):
        raise IllegalTransition(f"Job {job_id}: a device is listed twice.")
    try:
        with transaction.atomic():
            now = timezone.now()
            job = job_transition(
                job_id=job_id,
                to_state=JobState.STARTING,
                actor=EventActor.SCHEDULER,
                message=message or f"Starting on {len(device_ids)} device(s).",
                attempt=F("attempt") + 1,
                started_at=now,
                first_started_at=Coalesce(F("first_started_at"), Value(now)),
                reason="",
                retry_not_before=None,
            )
            if job.interactive:
                # Before this job's own allocations exist: its old port is not "in use".
                job.session_port = sessions.session_port_assign(device_ids=device_ids)
                Job.objects.filter(pk=job_id).update(session_port=job.session_port)
            Allocation.objects.bulk_create(
                Allocation(job_id=job_id, attempt=job.attempt, device_id=device_id, started_at=now)
                for device_id in device_ids
            )
    except IntegrityError as exc:
        if "allocation_one_live_per_device" in str(exc):
            raise IllegalTransition(
                f"Job {job_id}: a device is already held by another job."
            ) from exc
        raise IllegalTransition(
            f"Job {job_id}: some of devices {list(device_ids)} do not exist."
        ) from exc
    return job


def job_mark_running(
    *, job_id: int, message: str = "Container is running.", attempt: int | None = None
) -> Job:
    """STARTING → RUNNING: the launch started the program. With `attempt`, only that
    attempt: a launch that outlived its attempt (the job requeued and placed elsewhere
    meanwhile) must not mark the newer attempt running on GPUs of another node."""
    return job_transition(
        job_id=job_id,
        to_state=JobState.RUNNING,
        actor=EventActor.AGENT,
        message=message,
        at_attempt=attempt,
    )


# Backoff before a failed job's retry: Kueue's defaults (base 60 s, doubling, at most 1 h).
RETRY_BACKOFF_BASE_SECONDS = 60
RETRY_BACKOFF_MAX_SECONDS = 3600


def job_array_cancel(*, array_id: int, by: User) -> list[int]:
    """Cancel every task of an array the caller may see that has not ended (Slurm's
    `scancel ARRAY`); returns the ids cancelled, last index first.

    One transaction: no round sees part of the array cancelled, so none starts a held
    task in the slot a cancelled running one leaves. NotFound when the caller may see no
    task of it (another student's array reads as no array).
    """
    tasks = job_visible_to(user=by).filter(array_id=array_id)
    if not tasks.exists():
        raise NotFound(f"No array {array_id} of yours.")
    cancelled: list[int] = []
    with transaction.atomic():
        # Every task's row first, in id order, before any is cancelled: a cancel charges
        # the owner (and the group) under a lock on their row, and an agent finishing a
        # sibling takes the sibling's row, then the owner's. Taken one by one, the two
        # waited for each other (PostgreSQL's deadlock: the request or the poll failed).
        # The lock job_transition's UPDATE takes; the agent now waits for the commit, then
        # finds its task cancelled.
        pending = list(
            tasks.exclude(state__in=TERMINAL_STATES)
            .select_for_update(no_key=True, of=("self",))
            .order_by("pk")
            .values_list("pk", "array_index")
        )
        for job_id, _ in sorted(pending, key=lambda task: -task[1]):
            try:
                cancelled.append(job_cancel(job_id=job_id, by=by).pk)
            except IllegalTransition:
                continue  # it ended meanwhile
    return cancelled


def retry_backoff_seconds(retry: int) -> int:
    """How long retry number `retry` (1, 2, ...) waits before it may start."""
    return min(RETRY_BACKOFF_BASE_SECONDS * 2 ** (retry - 1), RETRY_BACKOFF_MAX_SECONDS)


FINISHABLE_STATES = frozenset({JobState.RUNNING, JobState.PREEMPTING})


def job_finish(
    *,
    job_id: int,
    exit_code: int,
    message: str = "",
    attempt: int | None = None,
    expected: frozenset[JobState] = FINISHABLE_STATES,
) -> Job:
    """RUNNING or PREEMPTING (or only `expected`) → SUCCEEDED (exit 0) or FAILED.

    A failed attempt of a job with retries left goes back to PENDING instead (see
    `_retry_failed_attempt`). With `attempt`, only that attempt is finished.
    """
    succeeded = exit_code == 0
    if not succeeded:
        retried = _retry_failed_attempt(
            job_id=job_id, exit_code=exit_code, message=message, attempt=attempt, expected=expected
        )
        if retried is not None:
            return retried
    finished = job_transition(
        job_id=job_id,
        to_state=JobState.SUCCEEDED if succeeded else JobState.FAILED,
        actor=EventActor.AGENT,
        message=message or f"Exited with code {exit_code}.",
        expected=expected,
        at_attempt=attempt,
        exit_code=exit_code,
        reason="" if succeeded else f"Exited with code {exit_code}.",
    )
    round_request_on_commit()
    return finished


def _retry_failed_attempt(
    *,
    job_id: int,
    exit_code: int,
    message: str,
    attempt: int | None = None,
    expected: frozenset[JobState] = FINISHABLE_STATES,
) -> Job | None:
    """RUNNING or PREEMPTING → PENDING when the job has retries left; else None.

    The retry waits `retry_backoff_seconds` (the snapshot leaves it out until then), keeps
    its attained service (the GPUs were used) and the exit code. Its pending spell counts
    from the end of the backoff (`scheduler.core.accounting.eligible_since`): the backoff is
    not time the scheduler kept it waiting. Only an exit of the job's own program counts:
    a lost node does not use a retry, a failed launch or a walltime timeout never retries,
    and neither does a job whose walltime is used up.
    """
    row = (
        Job.objects.filter(pk=job_id)
        .values(
            "state",
            "retries_used",
            "max_retries",
            "walltime_seconds",
            "total_run_seconds",
            "started_at",
        )
        .first()
    )
    if row is None or row["retries_used"] >= row["max_retries"]:
        return None
    if _walltime_exceeded(row, now=timezone.now()) is not None:
        return None  # a retry would have no time left to run
    state = JobState(row["state"])
    if state not in expected:
        return None
    retry = row["retries_used"] + 1
    backoff = retry_backoff_seconds(retry)
    not_before = timezone.now() + timedelta(seconds=backoff)
    exited = message or f"Exited with code {exit_code}."
    note = f"retry {retry} of {row['max_retries']} after a {backoff} s backoff"
    retried = job_transition(
        job_id=job_id,
        to_state=JobState.PENDING,
        actor=EventActor.AGENT,
        message=f"{exited} Requeued: {note}.",
        # Pinned to the state read above, so the retry count matches the attempt that failed.
        expected=frozenset({state}),
        at_attempt=attempt,
        exit_code=exit_code,
        retries_used=F("retries_used") + 1,
        retry_not_before=not_before,
        started_at=None,
        reason=f"Exited with code {exit_code}; {note}.",
    )
    round_request_on_commit()
    return retried


def job_launch_failed(*, job_id: int, message: str, attempt: int | None = None) -> Job:
    """STARTING → FAILED: the launch itself failed (bad image, node refused).

    With `attempt`, only that attempt: an old launch's failure must not fail (never to
    be retried) the attempt the job was requeued to meanwhile.
    """
    failed = job_transition(
        job_id=job_id,
        to_state=JobState.FAILED,
        actor=EventActor.AGENT,
        message=message,
        expected=frozenset({JobState.STARTING}),
        at_attempt=attempt,
        reason=message,
    )
    round_request_on_commit()  # its GPUs are free for the next job now, not at the timer
    return failed


def job_preempt(*, job_id: int, reason: str, by_job_id: int | None = None) -> Job:
    """RUNNING → PREEMPTING: the agent sends SIGTERM and waits the grace period."""
    cause = f" for job #{by_job_id}" if by_job_id is not None else ""
    return job_transition(
        job_id=job_id,
        to_state=JobState.PREEMPTING,
        actor=EventActor.SCHEDULER,
        message=f"Preempted{cause}: {reason}",
        reason=f"Preempted{cause}: {reason}",
        preempted_for=by_job_id,
    )


def job_requeue(
    *, job_id: int, message: str, attempt: int | None = None, process_gone: bool = True
) -> Job:
    """PREEMPTING or LOST → PENDING, back in the queue with its attained service kept.

    A job that has used up its walltime meanwhile becomes FAILED instead. `process_gone`
    false (a stop that left the process running, or could not tell): its devices stay
    busy until the node poll has stopped it (see `job_transition`).
    """
    row = (
        Job.objects.filter(pk=job_id)
        .values("state", "walltime_seconds", "total_run_seconds", "started_at")
        .first()
    )
    if row is None:
        raise NotFound(f"Job {job_id} does not exist.")
    current = JobState(row["state"])
    timed_out = _walltime_exceeded(row, now=timezone.now())
    if timed_out is not None:
        # Requeued, it would only be started to be timed out by the next round.
        failed = job_fail(
            job_id=job_id,
            message=timed_out,
            expected=frozenset({current}),
            attempt=attempt,
            process_gone=process_gone,
        )
        round_request_on_commit()  # a PREEMPTING job's devices are free now
        return failed
    extra: dict[str, Any] = {}
    if current == JobState.PREEMPTING:
        extra["preemption_count"] = F("preemption_count") + 1
    requeued = job_transition(
        job_id=job_id,
        to_state=JobState.PENDING,
        actor=EventActor.SYSTEM,
        message=message,
        # Pinned to the state read above, so the preemption count matches the source.
        expected=frozenset({current}),
        at_attempt=attempt,
        process_gone=process_gone,
        reason=message,
        started_at=None,
        **extra,
    )
    round_request_on_commit()
    return requeued


def job_mark_lost(*, job_id: int, message: str, attempt: int | None = None) -> Job:
    """STARTING or RUNNING → LOST: its node stopped answering."""
    return job_transition(
        job_id=job_id,
        to_state=JobState.LOST,
        actor=EventActor.SYSTEM,
        message=message,
        at_attempt=attempt,
        reason=message,
    )


def jobs_lost_requeue() -> list[int]:
    """Requeue jobs left LOST: nothing else reads that state (a worker that died between
    LOST and PENDING before both were one transaction left some). Returns their ids;
    the liveness sweep calls it."""
    requeued = []
    for job_id in Job.objects.filter(state=JobState.LOST).values_list("pk", flat=True):
        try:
            job_requeue(job_id=job_id, message="Requeued: it was left lost.")
        except ApplicationError:
            continue  # cancelled or requeued meanwhile
        requeued.append(job_id)
    return requeued


def jobs_time_out(*, now: datetime) -> list[int]:
    """STARTING or RUNNING → FAILED for every job that has used up its walltime.

    The limit counts all the time the job has held devices, over every attempt (Kueue's
    maximum execution time counts the same way): restarting the clock at each requeue
    would let a job preempted often run past its limit. A timed-out job is not retried
    (as in Slurm, TIMEOUT is final). The node poll then stops its process, SIGTERM and
    grace first, exactly as for a cancelled job. Returns the ids of the jobs timed out.
    """
    running = Job.objects.filter(
        state__in=(JobState.STARTING, JobState.RUNNING), walltime_seconds__isnull=False
    ).values("pk", "state", "walltime_seconds", "total_run_seconds", "started_at")
    timed_out = []
    for row in running:
        job_id, message = row["pk"], _walltime_exceeded(row, now=now)
        if message is None:
            continue
        try:
            job_fail(
                job_id=job_id,
                message=message,
                expected=frozenset({JobState.STARTING, JobState.RUNNING}),
                process_gone=False,  # the poll stops it; its GPUs stay busy until then
            )
        except ApplicationError:
            continue  # it ended or was preempted meanwhile: nothing left to time out
        timed_out.append(job_id)
    return timed_out


def _walltime_exceeded(row: dict[str, Any], *, now: datetime) -> str | None:
    """The reason to fail a job whose walltime is used up, or None while time is left.

    `row` holds the job's state, walltime_seconds, total_run_seconds and started_at.
    """
    limit = row["walltime_seconds"]
    if limit is None:
        return None
    ran = job_run_seconds(
        state=row["state"],
        total_run_seconds=row["total_run_seconds"],
        started_at=row["started_at"],
        now=now,
    )
    if ran < limit:
        return None
    return f"Walltime exceeded: ran {_clock(ran)} of its {_clock(limit)} limit."


def _clock(seconds: float) -> str:
    """Seconds as h:mm:ss, the way Slurm prints time limits."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def job_fail(
    *,
    job_id: int,
    message: str,
    expected: frozenset[JobState] | None = None,
    attempt: int | None = None,
    process_gone: bool = True,
) -> Job:
    """→ FAILED by the system (e.g. a used-up walltime), from `expected` states if given."""
    return job_transition(
        job_id=job_id,
        to_state=JobState.FAILED,
        actor=EventActor.SYSTEM,
        message=message,
        expected=expected,
        at_attempt=attempt,
        process_gone=process_gone,
        reason=message,
    )
