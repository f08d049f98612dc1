"""The queue as the scheduler sees it: pending jobs in its order, running jobs by level.

Students see every entry of the queue (so they know what is ahead of them) but only their
own jobs in full: another user's entry shows its group, GPUs, level and wait, never its
owner, name or id (the access rule, `jobs.selectors.job_seen_by`: students see only their
own jobs, a group's coordinators its jobs too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q
from django.utils import timezone

from accounts.models import User
from jobs.choices import HOLDING_STATES, JobState
from jobs.models import Job
from jobs.selectors import job_seen_by, jobs_live_service, texts_for_viewer
from scheduler.policies.base import QUOTA_NARROWING

from ..models import QueueSample

# Reason codes the scheduler writes (scheduler.core.types.ReasonCode), said in words.
REASON_WORDS = {
    "QuotaExceeded": "Held by a quota",
    "WaitingForResources": "Waiting for free GPUs",
    "TypeUnavailable": "No schedulable GPU of an accepted type",
    "Behind": "Waiting behind higher-priority jobs",
    "NodeDrained": "The nodes it needs take no new jobs",
    "Reserved": "Free GPUs are kept for a job that has waited long",
    "OwnerDisabled": "The owner's account is disabled",
    "InvalidAccount": "The owner has left the job's group",
    "WaitingForFasterType": "Waiting for a faster GPU type",
    "Dependency": "Waiting for jobs it depends on",
    "DependencyNeverSatisfied": "A job it depends on did not succeed",
    "ArrayLimit": "Its array runs as many tasks as it may at once",
}
# Codes whose detail is a limit of the job's owner or group: a quota's cap ("user max GPUs
# 2", "group max a100 GPUs 3", scheduler.policies.fairness), which only those who see the job
# in full (its owner, the group's coordinators, admins) are told, as the quota pages do.
PRIVATE_DETAIL_CODES = frozenset({"QuotaExceeded"})
# Waiting-time histogram bins (upper bounds), wide enough for minutes-long and day-long waits.
WAIT_BINS: list[tuple[str, timedelta | None]] = [
    ("< 1 min", timedelta(minutes=1)),
    ("1–5 min", timedelta(minutes=5)),
    ("5–15 min", timedelta(minutes=15)),
    ("15–60 min", timedelta(hours=1)),
    ("1–3 h", timedelta(hours=3)),
    ("3–12 h", timedelta(hours=12)),
    ("12–24 h", timedelta(hours=24)),
    ("> 1 day", None),
]


@dataclass(frozen=True)
class QueueEntry:
    """One row of the queue page and the queue API, already redacted for the viewer."""

    job_id: int | None
    name: str
    owner: str
    group: str
    mine: bool
    visible: bool
    state: str
    num_gpus: int
    accepted_types: list[str]
    queue_level: int
    queue_position: int | None
    # Attained service in normalized GPU-hours (hours x GPUs x device speed), the Tiresias
    # queues' measure; not plain GPU-hours, although the name (kept for the API) says so.
    attained_gpu_hours: float
    waiting_seconds: float
    reason: str
    reason_words: str
    jobs_ahead: int
    gpus_ahead: int
    # Pending jobs: the latest start forecast (scheduler.forecast_services), if it gave one.
    estimated_start: datetime | None = None


def reason_in_words(reason: str) -> str:
    """'Behind: 3 jobs in queue 0' -> 'Waiting behind higher-priority jobs: 3 jobs in queue 0'."""
    if not reason:
        return "Waiting for the next scheduling round"
    code, _, detail = reason.partition(": ")
    words = REASON_WORDS.get(code)
    if words is None:
        return reason
    return f"{words}: {detail}" if detail else words


def reason_for_outsider(reason: str) -> str:
    """`reason` as told to someone who may not see its job in full: a quota's cap is left
    out ("QuotaExceeded: user max GPUs 2" -> "QuotaExceeded", said "Held by a quota"), and
    so are the limits a capacity reason adds ("…; quota rules out a100 (user max a100 GPUs
    1)" -> "…; a quota rules out some of its types")."""
    code, _, _ = reason.partition(": ")
    if code in PRIVATE_DETAIL_CODES:
        return code
    capacity, narrowed, _ = reason.partition(QUOTA_NARROWING)
    return f"{capacity}; a quota rules out some of its types" if narrowed else reason


def _entry(
    row: dict,
    *,
    viewer: User,
    now: datetime,
    jobs_ahead: int,
    gpus_ahead: int,
    live: float = 0.0,
) -> QueueEntry:
    mine = row["owner_id"] == viewer.pk
    visible = job_seen_by(viewer, owner_id=row["owner_id"], group_id=row["group_id"])
    since = row["pending_since"] if row["state"] == JobState.PENDING else row["started_at"]
    reason = row["reason"] if row["state"] == JobState.PENDING else ""
    if not visible:
        reason = reason_for_outsider(reason)
    return QueueEntry(
        job_id=row["id"] if visible else None,
        name=row["name"] if visible else "",
        owner=row["owner__username"] if visible else "",
        group=row["group__name"] or "",
        mine=mine,
        visible=visible,
        state=row["state"],
        num_gpus=row["num_gpus"],
        accepted_types=row["accepted_types"] or [],
        queue_level=row["queue_level"],
        queue_position=row["queue_position"],
        attained_gpu_hours=round((row["attained_service"] + live) / 3600.0, 2),
        waiting_seconds=max(0.0, (now - since).total_seconds()) if since else 0.0,
        reason=reason,
        reason_words=reason_in_words(reason) if row["state"] == JobState.PENDING else "",
        jobs_ahead=jobs_ahead,
        gpus_ahead=gpus_ahead,
        estimated_start=_estimated_start(row),
    )


_ROW_FIELDS = (
    "id",
    "name",
    "owner_id",
    "owner__username",
    "group_id",
    "group__name",
    "state",
    "num_gpus",
    "accepted_types",
    "queue_level",
    "queue_position",
    "attained_service",
    "pending_since",
    "started_at",
    "reason",
    "start_forecast__start_at",
    "start_forecast__made_at",
)


def _estimated_start(row: dict) -> datetime | None:
    """A pending job's forecast start, unless the forecast predates its current wait (as
    `scheduler.selectors.start_forecast_of` reads it for the job's own pages)."""
    made, since = row["start_forecast__made_at"], row["pending_since"]
    if row["state"] != JobState.PENDING or (made and since and made < since):
        return None
    return row["start_forecast__start_at"]


def pending_order() -> list[tuple[int, int, int]]:
    """(job id, GPUs, owner id) of every pending job, in the order of the last round.

    Jobs the scheduler has not ranked yet (submitted since the last round) come last, by
    arrival. A light read: three integers per pending job.
    """
    return list(
        Job.objects.filter(state=JobState.PENDING)
        .order_by(F("queue_position").asc(nulls_last=True), "submitted_at", "id")
        .values_list("id", "num_gpus", "owner_id")
    )


@dataclass(frozen=True)
class QueueView:
    pending: list[QueueEntry]  # the requested page of pending jobs
    pending_total: int
    pending_gpus: int
    running: list[QueueEntry]
    mine: list[QueueEntry]  # the viewer's pending jobs, wherever they are in the queue


def queue_view(
    *,
    viewer: User,
    order: Sequence[tuple[int, int, int]] | None = None,
    page_rows: Sequence[tuple[int, int, int]] | None = None,
) -> QueueView:
    """The pending queue (the page `page_rows` of `order`), running jobs, the viewer's pending jobs.

    1. One light query gives the whole pending order, so each job's position and the jobs and
       GPUs ahead of it are exact however the page is cut.
    2. Full rows are read only for the page and for the viewer's own pending jobs.
    """
    now = timezone.now()
    order = pending_order() if order is None else order
    page_rows = order[:50] if page_rows is None else page_rows
    ahead: dict[int, tuple[int, int]] = {}
    gpus_before = 0
    for index, (job_id, gpus, _) in enumerate(order):
        ahead[job_id] = (index, gpus_before)
        gpus_before += gpus
    page_ids = [job_id for job_id, _, _ in page_rows]
    my_ids = [job_id for job_id, _, owner_id in order if owner_id == viewer.pk]
    rows = {
        row["id"]: row
        for row in Job.objects.filter(pk__in=set(page_ids) | set(my_ids)).values(*_ROW_FIELDS)
    }
    # Reasons name other jobs ("Behind: job 7 is first in line"): not those a student
    # may not see. One query for every reason shown.
    shown = list(rows.values())
    for row, reason in zip(
        shown, texts_for_viewer([row["reason"] for row in shown], user=viewer), strict=True
    ):
        row["reason"] = reason

    def pending_entry(job_id: int) -> QueueEntry:
        jobs_ahead, gpus_ahead = ahead[job_id]
        return _entry(
            rows[job_id], viewer=viewer, now=now, jobs_ahead=jobs_ahead, gpus_ahead=gpus_ahead
        )

    running_rows = list(
        Job.objects.filter(state__in=HOLDING_STATES)
        .order_by("queue_level", "started_at", "id")
        .values(*_ROW_FIELDS)
    )
    live = jobs_live_service(job_ids=[row["id"] for row in running_rows], now=now)
    return QueueView(
        pending=[pending_entry(job_id) for job_id in page_ids if job_id in rows],
        pending_total=len(order),
        pending_gpus=gpus_before,
        running=[
            _entry(
                row,
                viewer=viewer,
                now=now,
                jobs_ahead=0,
                gpus_ahead=0,
                live=live.get(row["id"], 0.0),
            )
            for row in running_rows
        ],
        mine=[pending_entry(job_id) for job_id in my_ids if job_id in rows],
    )


def queue_length_series(*, since: datetime) -> dict[int, list[tuple[datetime, int]]]:
    """Pending jobs per queue level over time, from the periodic QueueSample rows."""
    series: dict[int, list[tuple[datetime, int]]] = {}
    samples = (
        QueueSample.objects.filter(at__gte=since)
        .order_by("at", "level")
        .values_list("at", "level", "pending_jobs")
    )
    for at, level, pending in samples:
        series.setdefault(level, []).append((at, pending))
    return series


def queueing_delay_histogram(*, since: datetime) -> list[tuple[str, int]]:
    """How long jobs first started since `since` waited before that start, in WAIT_BINS.

    One aggregate query: the bins are counted in the database, not in Python.
    """
    delay = ExpressionWrapper(
        F("first_started_at") - F("submitted_at"), output_field=DurationField()
    )
    counts = {}
    lower: timedelta | None = None
    for index, (_, upper) in enumerate(WAIT_BINS):
        condition = Q()
        if lower is not None:
            condition &= Q(delay__gte=lower)
        if upper is not None:
            condition &= Q(delay__lt=upper)
        counts[f"bin{index}"] = Count("id", filter=condition)
        lower = upper
    totals = (
        Job.objects.filter(first_started_at__gte=since).annotate(delay=delay).aggregate(**counts)
    )
    return [(label, totals[f"bin{index}"]) for index, (label, _) in enumerate(WAIT_BINS)]


def pending_wait_histogram(*, entries_waits: list[float]) -> list[tuple[str, int]]:
    """The same bins for the waits of jobs pending now (seconds)."""
    counts = dict.fromkeys((label for label, _ in WAIT_BINS), 0)
    for seconds in entries_waits:
        for label, upper in WAIT_BINS:
            if upper is None or seconds < upper.total_seconds():
                counts[label] += 1
                break
    return list(counts.items())


def pending_waits() -> list[float]:
    """Seconds each pending job has waited since it last became pending."""
    now = timezone.now()
    return [
        max(0.0, (now - since).total_seconds())
        for since in Job.objects.filter(
            state=JobState.PENDING, pending_since__isnull=False
        ).values_list("pending_since", flat=True)
    ]
