"""Idle reaping: a running job that leaves its GPUs idle is warned, then cancelled.

Labs lose whole GPUs to notebooks and crashed training loops that hold them and compute
nothing (Determined's idle timeout, dstack's idle duration, OpenPAI's warn-then-kill).
Every minute, when an admin has switched it on (`SchedulerConfig.idle_reap`, off by
default), `jobs_idle_sweep` judges each RUNNING job by its own GPU use (the per-job
readings the node agents report, `agents.selectors.jobs_gpu_use`). Interactive sessions
(jobs.sessions), which the scheduler never preempts, are judged on their own window
(`session_idle_minutes`, 120 by default, 0 = never) whether or not batch jobs are:

1. A job that has held its GPUs for the whole idle window, with readings for at least
   half its minutes, and averaged less than the threshold over it is warned: an event on
   its history, the warning on its page, and a mail to its owner (whatever `notify`
   says: a job about to be cancelled is news).
2. When the grace after the warning is over, the grace's average decides: under the
   threshold, the job is cancelled by the system with an `IdleReaped` reason and its GPUs
   go to waiting jobs; at or over it (or with no reading to judge), the warning is lifted
   and the next window starts then. Deciding once, at the deadline, keeps a job that
   hovers at the threshold from being warned and cleared (and mailed) every minute.

A warning belongs to one run: leaving RUNNING clears it (`jobs.services.job_transition`).
A job with no per-job reading is never judged (its node's agent may not report per-job
use), and an admin can keep a job from reaping for a while (`job_idle_keep`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from accounts.models import User
from agents.models import JobGpuMinute
from agents.selectors import jobs_gpu_use
from config.errors import ApplicationError, IllegalTransition, ValidationFailed
from scheduler.models import SchedulerConfig
from scheduler.selectors import scheduler_config_get
from scheduler.triggers import round_request_on_commit

from .choices import EventActor, JobState
from .models import Allocation, Job, JobEvent
from .notifications import IDLE_WARNING, job_notify_request
from .selectors import job_get_for_user
from .services import job_transition

logger = logging.getLogger(__name__)

IDLE_REAPED = "IdleReaped"
MAX_KEEP_HOURS = 24 * 30


@dataclass
class IdleSweep:
    warned: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)
    reaped: list[int] = field(default_factory=list)


@dataclass
class _Running:
    devices: list[int]
    since: datetime  # when it took its GPUs (the current run)
    warned_at: datetime | None
    judged_from: datetime | None  # a lifted warning: its next window starts here
    exempt_until: datetime | None
    interactive: bool  # a session: its own window (SchedulerConfig.session_idle_minutes)


def jobs_idle_sweep(*, now: datetime) -> IdleSweep:
    """Warn, clear or cancel running jobs by their GPU use (see the module)."""
    sweep = IdleSweep()
    config = scheduler_config_get()
    # The idle window in minutes of batch jobs (False) and of sessions (True); 0 = off.
    window_of = {interactive: idle_window_of(config, interactive) for interactive in (False, True)}
    for interactive, minutes in window_of.items():
        if not minutes:
            # Switched off: warnings lapse, so switching it on again never cancels a job
            # on a warning its owner got long ago.
            Job.objects.filter(idle_warned_at__isnull=False, interactive=interactive).update(
                idle_warned_at=None
            )
    if not any(window_of.values()):
        return sweep
    grace = timedelta(minutes=config.idle_grace_minutes)
    threshold = config.idle_threshold_pct
    running = _running_jobs()
    due: dict[int, _Running] = {}  # warned, the grace over: decided now
    candidates: dict[int, _Running] = {}  # not warned, a whole window to judge
    for job_id, job in running.items():
        minutes = window_of[job.interactive]
        if not minutes or (job.exempt_until is not None and job.exempt_until > now):
            continue
        if job.warned_at is not None:
            if now >= job.warned_at + grace:
                due[job_id] = job
        elif max(job.since, job.judged_from or job.since) <= now - timedelta(minutes=minutes):
            candidates[job_id] = job
    window_start = {
        job_id: now - timedelta(minutes=window_of[job.interactive])
        for job_id, job in candidates.items()
    }
    # A window or a grace with readings for less than half its minutes (an image pull, an
    # agent that was down) is not judged: a few idle minutes are not an idle hour. A grace
    # that cannot be judged lifts its warning (below).
    covered = _minutes_with_readings(
        window_start
        | {job_id: job.warned_at for job_id, job in due.items() if job.warned_at is not None}
    )
    candidates = {
        job_id: job
        for job_id, job in candidates.items()
        if covered.get(job_id, 0) * 2 >= window_of[job.interactive]
    }
    use = jobs_gpu_use(
        held={job_id: job.devices for job_id, job in (candidates | due).items()},
        since={
            **{job_id: window_start[job_id] for job_id in candidates},
            **{job_id: job.warned_at for job_id, job in due.items()},
        },
        now=now,
    )
    for job_id, job in candidates.items():
        mean = use[job_id]
        if (
            mean is not None
            and mean < threshold
            and _warn(
                job_id,
                mean=mean,
                config=config,
                window_minutes=window_of[job.interactive],
                now=now,
            )
        ):
            sweep.warned.append(job_id)
    # Decided once, at the deadline, on the grace's average: judged every minute, a job
    # hovering at the threshold would be warned and cleared (and mailed) again and again.
    for job_id, job in due.items():
        warned_at, mean = job.warned_at, use[job_id]
        if warned_at is None:  # `due` holds warned jobs only
            continue
        if covered.get(job_id, 0) * 2 < config.idle_grace_minutes:
            mean = None  # too few readings in the grace to judge it
        if mean is None or mean >= threshold:
            if _clear(job_id, mean=mean, warned_at=warned_at, now=now):
                sweep.cleared.append(job_id)
        elif _reap(job_id, mean=mean, threshold=threshold, warned_at=warned_at, now=now):
            sweep.reaped.append(job_id)
    if sweep.warned or sweep.cleared or sweep.reaped:
        logger.info(
            "Idle sweep: warned %s, cleared %s, cancelled %s",
            sweep.warned,
            sweep.cleared,
            sweep.reaped,
        )
    return sweep


def idle_window_of(config: SchedulerConfig, interactive: bool) -> int:
    """The idle window (minutes) the sweep judges a job on: a session's own window, a batch
    job's while reaping is on; 0 when it is not judged at all."""
    if interactive:
        return config.session_idle_minutes
    return config.idle_window_minutes if config.idle_reap else 0


def _running_jobs() -> dict[int, _Running]:
    """RUNNING jobs with the GPUs they hold and since when."""
    jobs: dict[int, _Running] = {}
    for job_id, device_id, started_at, warned_at, judged_from, exempt_until, interactive in (
        Allocation.objects.filter(ended_at__isnull=True, job__state=JobState.RUNNING)
        .order_by("job_id", "device_id")
        .values_list(
            "job_id",
            "device_id",
            "started_at",
            "job__idle_warned_at",
            "job__idle_judged_from",
            "job__idle_exempt_until",
            "job__interactive",
        )
    ):
        job = jobs.setdefault(
            job_id, _Running([], started_at, warned_at, judged_from, exempt_until, interactive)
        )
        job.devices.append(device_id)
        job.since = min(job.since, started_at)
    return jobs


def _minutes_with_readings(since: dict[int, datetime]) -> dict[int, int]:
    """Per job, the minutes since `since[job]` with a per-job utilization reading (on any
    of its GPUs). One query per distinct `since`."""
    windows: dict[datetime, list[int]] = defaultdict(list)
    for job_id, start in since.items():
        windows[start].append(job_id)
    counted: dict[int, int] = {}
    for start, job_ids in windows.items():
        counted.update(
            JobGpuMinute.objects.filter(
                job_id__in=job_ids, minute__gte=start, utilization_avg__isnull=False
            )
            .values("job_id")
            .annotate(minutes=Count("minute", distinct=True))
            .order_by()
            .values_list("job_id", "minutes")
        )
    return counted


def _clock(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")


def _warn(
    job_id: int, *, mean: float, config: SchedulerConfig, window_minutes: int, now: datetime
) -> bool:
    """Mark the job warned, with an event and a mail; False if it changed meanwhile."""
    deadline = now + timedelta(minutes=config.idle_grace_minutes)
    message = (
        f"Idle: its GPUs were used {mean:.1f} % on average over the last "
        f"{window_minutes} min, below the lab's {config.idle_threshold_pct:g} %. "
        f"It will be cancelled at {_clock(deadline)} unless they average "
        f"{config.idle_threshold_pct:g} % or more from now until then."
    )
    with transaction.atomic():
        # Not if an admin kept it meanwhile (the sweep read the job before).
        changed = (
            Job.objects.filter(pk=job_id, state=JobState.RUNNING, idle_warned_at__isnull=True)
            .exclude(idle_exempt_until__gt=now)
            .update(idle_warned_at=now)
        )
        if not changed:
            return False
        JobEvent.objects.create(job_id=job_id, actor=EventActor.SYSTEM, message=message)

        def mail(job_id: int = job_id) -> None:  # a function for on_commit(robust=True)
            job_notify_request(job_id=job_id, state=IDLE_WARNING)

        transaction.on_commit(mail, robust=True)
    return True


def _clear(job_id: int, *, mean: float | None, warned_at: datetime, now: datetime) -> bool:
    """Lift a warning at its deadline: the GPUs were used, or nothing could be read."""
    if mean is None:
        message = "Idle warning lifted: no GPU reading since the warning, so it is not judged."
    else:
        message = (
            f"No longer idle: its GPUs were used {mean:.1f} % on average since the warning; "
            "it will not be cancelled."
        )
    with transaction.atomic():
        changed = Job.objects.filter(
            pk=job_id, state=JobState.RUNNING, idle_warned_at=warned_at
        ).update(idle_warned_at=None, idle_judged_from=now)
        if changed:
            JobEvent.objects.create(job_id=job_id, actor=EventActor.SYSTEM, message=message)
    return bool(changed)


def _reap(
    job_id: int, *, mean: float, threshold: float, warned_at: datetime, now: datetime
) -> bool:
    reason = (
        f"{IDLE_REAPED}: its GPUs were used {mean:.1f} % on average since the idle warning "
        f"at {_clock(warned_at)}, below the lab's {threshold:g} %."
    )
    with transaction.atomic():
        # The same warning, and no admin's Keep since the sweep read the job: the row lock
        # holds off a Keep until the cancel has committed (or sees the Keep first).
        still_due = (
            Job.objects.select_for_update()
            .filter(pk=job_id, state=JobState.RUNNING, idle_warned_at=warned_at)
            .exclude(idle_exempt_until__gt=now)
            .exists()
        )
        if not still_due:
            return False
        try:
            job_transition(
                job_id=job_id,
                to_state=JobState.CANCELLED,
                actor=EventActor.SYSTEM,
                message=f"Cancelled for leaving its GPUs idle. {reason}",
                reason=reason,
                expected=frozenset({JobState.RUNNING}),
                process_gone=False,  # the node poll stops it, SIGTERM and grace first
            )
        except ApplicationError:
            return False  # it ended or was preempted meanwhile
    round_request_on_commit()  # its GPUs are free once the poll has stopped it
    return True


def may_keep_from_reaping(user: User, *, owner_id: int, group_id: int | None) -> bool:
    """Whether `user` may keep a job of `owner_id` charged to `group_id` from idle reaping:
    a lab admin, or a coordinator of that group (a PI vouching for a student's quiet run)
    other than the job's owner: the warning exists because the owner's own judgement said
    the GPUs were busy, and a TA who coordinates their own group is still its owner."""
    if user.is_lab_admin:
        return True
    return owner_id != user.pk and group_id is not None and group_id in user.coordinated_group_ids


def job_idle_keep(*, job_id: int, by: User, hours: int) -> Job:
    """A lab admin, or a coordinator of the job's group other than its owner, keeps a job
    from idle reaping for `hours` (and lifts a warning)."""
    job = job_get_for_user(user=by, job_id=job_id)
    if not may_keep_from_reaping(by, owner_id=job.owner_id, group_id=job.group_id):
        raise PermissionDenied(
            "Only lab admins and the coordinators of the job's group may keep a job from "
            "idle reaping."
        )
    if not 1 <= hours <= MAX_KEEP_HOURS:
        raise ValidationFailed({"hours": [f"Between 1 and {MAX_KEEP_HOURS} hours."]})
    until = timezone.now() + timedelta(hours=hours)
    with transaction.atomic():
        # Checked under the row lock: a reap or a finish committing meanwhile is seen here,
        # not kept-from-reaping after the fact.
        state = Job.objects.select_for_update().filter(pk=job.pk).values_list("state", flat=True)
        if state.first() != JobState.RUNNING:
            raise IllegalTransition(
                f"Job {job.pk} is not running: only a running job can be kept from idle reaping."
            )
        Job.objects.filter(pk=job.pk).update(idle_exempt_until=until, idle_warned_at=None)
        JobEvent.objects.create(
            job_id=job.pk,
            actor=EventActor.USER,
            actor_user=by,
            message=f"Kept from idle reaping until {_clock(until)} by {by.username}.",
        )
    job.refresh_from_db()
    return job
