"""Reads of jobs, with the access rule in one place: students see their own, coordinators
their groups' too, admins all (`job_visible_to`, `job_seen_by`)."""

from __future__ import annotations

import math
import re
import shlex
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, QuerySet

from accounts.models import User
from agents.models import JobGpuMinute, JobGpuSample
from config.errors import NotFound
from scheduler.core.accounting import live_service

from .choices import HOLDING_STATES, JobState
from .models import Allocation, Job, JobEvent


def jobs_live_service(*, job_ids: Iterable[int], now: datetime) -> dict[int, float]:
    """Normalized GPU-seconds of each job's current run, not yet in `Job.attained_service`.

    The stored service is folded in only when a job leaves its devices (jobs.services), so a
    running job read from the row alone shows what it had before this run (0 on its first).
    The live part is what the scheduler's snapshot adds (`accounting.live_service`): Σ
    device speed × (now − allocation start) over the job's live allocations. One query;
    jobs holding nothing are left out.
    """
    held: dict[int, list[int]] = defaultdict(list)
    since: dict[int, float] = {}
    speed_of: dict[int, float] = {}
    rows = Allocation.objects.filter(job_id__in=list(job_ids), ended_at__isnull=True).values_list(
        "job_id", "device_id", "started_at", "device__device_type__speed"
    )
    for job_id, device_id, started_at, speed in rows:
        held[job_id].append(device_id)
        since[job_id] = started_at.timestamp()  # one gang: its devices start together
        speed_of[device_id] = speed
    now_s = now.timestamp()
    return {
        job_id: live_service(devices, since[job_id], now_s, speed_of)
        for job_id, devices in held.items()
    }


def job_run_seconds(
    *, state: str, total_run_seconds: float, started_at: datetime | None, now: datetime
) -> float:
    """Seconds the job has held devices, all attempts: stored time plus the current run.

    `total_run_seconds` is folded in at each transition (jobs.services), so the current
    run is added only while the job holds devices.
    """
    if state in HOLDING_STATES and started_at is not None:
        return total_run_seconds + max((now - started_at).total_seconds(), 0.0)
    return total_run_seconds


def job_visible_to(*, user: User) -> QuerySet[Job]:
    """The jobs `user` sees and may act on: their own, those charged to a group they
    coordinate (Slurm's account coordinators), and every job for a lab admin."""
    # The start forecast too: a pending job's estimated start is shown wherever it is.
    jobs = Job.objects.select_related("owner", "group", "array", "start_forecast")
    if user.is_lab_admin:
        return jobs
    if user.coordinated_group_ids:
        return jobs.filter(Q(owner=user) | Q(group_id__in=user.coordinated_group_ids))
    return jobs.filter(owner=user)


def jobs_dependable_by(*, user: User) -> QuerySet[Job]:
    """The jobs `user`'s submissions may wait for: their own, any for a lab admin. Narrower
    than what a coordinator sees: a dependency ties the coordinator's job to a member's,
    whose owner never agreed to it."""
    if user.is_lab_admin:
        return Job.objects.all()
    return Job.objects.filter(owner=user)


def job_seen_by(user: User, *, owner_id: int, group_id: int | None) -> bool:
    """`job_visible_to`'s rule for one job known by its owner and group: for pages that
    read many jobs' rows and show only some of them by name (the queue, the cluster)."""
    return (
        owner_id == user.pk
        or user.is_lab_admin
        or (group_id is not None and group_id in user.coordinated_group_ids)
    )


def job_get_for_user(*, user: User, job_id: int) -> Job:
    """The job if `user` may see it; otherwise NotFound (never reveal that it exists)."""
    job = job_visible_to(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} not found.")
    return job


def job_list(
    *,
    user: User,
    states: Sequence[str] = (),
    owner: str | None = None,
    group: str | None = None,
    array: int | None = None,
) -> QuerySet[Job]:
    """Jobs the user may see, newest first, filtered by states (any of them), owner name,
    group name and array (its tasks by index)."""
    jobs = job_visible_to(user=user)
    if states:
        jobs = jobs.filter(state__in=states)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    if group:
        jobs = jobs.filter(group__name=group)
    if array is not None:
        return jobs.filter(array_id=array).order_by("array_index", "id")
    return jobs.order_by("-submitted_at", "-id")


@dataclass(frozen=True)
class Dependency:
    job_id: int | None  # None: a job the viewer may not see
    state: str


def job_dependencies(*, job: Job, user: User) -> list[Dependency]:
    """The jobs `job` waits for, with their states; ones `user` may not see unnamed."""
    needed = list(job.depends_on.order_by("pk").values_list("pk", "state"))
    if not needed:
        return []
    visible = set(jobs_visible_by_id(user=user, job_ids=[pk for pk, _ in needed]))
    return [Dependency(pk if pk in visible else None, state) for pk, state in needed]


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    return job.events.select_related("actor_user").order_by("created_at", "id")


def job_state_counts(*, user: User, owner: str | None = None) -> dict[str, int]:
    """Jobs the user may see per state, narrowed by owner name as `job_list` narrows them."""
    counts = dict.fromkeys(JobState.values, 0)
    jobs = job_visible_to(user=user)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    rows = jobs.order_by().values("state").annotate(total=Count("id"))
    for row in rows:
        counts[row["state"]] = row["total"]
    return counts


def jobs_visible_by_id(*, user: User, job_ids: Iterable[int]) -> dict[int, Job]:
    """Of `job_ids`, the jobs `user` may see, by id (one query; unknown ids are left out).

    Pages that mention other jobs (e.g. "preempted for job #12") link only these, so a
    student never learns anything about a job that is not theirs.
    """
    wanted = set(job_ids)
    if not wanted:
        return {}
    return {job.pk: job for job in job_visible_to(user=user).filter(pk__in=wanted)}


# "job 12", "job #12", "Job 12": how the scheduler's reasons and events name other jobs.
# At most 18 digits (leading zeros aside), which every id fits: texts quote what nodes and
# users wrote, and int() refuses a number of over 4,300 digits (a 500 on the job's page).
_JOB_MENTION = re.compile(r"\bjob #?0*(\d{1,18})\b", re.IGNORECASE)


def texts_for_viewer(texts: Sequence[str], *, user: User) -> list[str]:
    """`texts` with every mention of a job `user` may not see made "another job".

    Reasons and event messages name other jobs ("preempted for job #12", "Behind: job 7
    is first in line"); a student's own job's reason must not tell them other students'
    job ids, as the queue and the job page already do not. One query for all the texts.
    """
    mentioned = {int(match[1]) for text in texts for match in _JOB_MENTION.finditer(text)}
    if not mentioned or user.is_lab_admin:
        return list(texts)
    visible = set(jobs_visible_by_id(user=user, job_ids=mentioned))

    def name(match: re.Match[str]) -> str:
        return match[0] if int(match[1]) in visible else "another job"

    return [_JOB_MENTION.sub(name, text) for text in texts]


@dataclass(frozen=True)
class GpuUsePoint:
    at: datetime
    utilization_pct: float | None  # None: the device reported no utilization (e.g. MIG)
    memory_used_mb: int


@dataclass(frozen=True)
class DeviceGpuUse:
    device_id: int
    label: str  # "node/index (type)"
    points: list[GpuUsePoint]
    step: timedelta  # the spacing of the points: a minute, or the bucket width


MINUTE = timedelta(minutes=1)
GPU_USE_WINDOW = timedelta(hours=24)
GPU_USE_MAX_POINTS = 480  # per device: enough for a 390-1200 px wide chart


def job_gpu_use(
    *,
    job: Job,
    window: timedelta = GPU_USE_WINDOW,
    max_points: int = GPU_USE_MAX_POINTS,
) -> list[DeviceGpuUse]:
    """What `job` used of each GPU over the last `window` of its activity, oldest first.

    1. The window ends at the job's newest reading (per-minute roll-up or raw sample), not
       at now: a job that last ran two days ago still shows its last day of use.
    2. Per-minute roll-ups (`JobGpuMinute`: mean utilization, peak memory) cover the
       window up to the job's last rolled-up minute; raw heartbeat samples
       (`JobGpuSample`) after that minute fill in what the roll-up has not reached yet.
    3. Long windows are bucketed to at most `max_points` points per device (mean
       utilization, peak memory), which keeps the page light under auto-refresh.
    Four queries, whatever the number of devices.
    """
    last_minute = JobGpuMinute.objects.filter(job=job).aggregate(last=Max("minute"))["last"]
    last_raw = JobGpuSample.objects.filter(job=job).aggregate(last=Max("at"))["last"]
    ends = [at for at in (last_minute and last_minute + MINUTE, last_raw) if at is not None]
    if not ends:
        return []
    start = max(ends) - window
    devices: dict[int, tuple[str, int, str]] = {}  # id -> (node name, index, type name)
    points: dict[int, list[GpuUsePoint]] = {}

    def add(row: dict[str, Any], at: datetime, utilization: float | None, memory: int) -> None:
        device_id = row["device_id"]
        if device_id not in devices:
            devices[device_id] = (
                row["device__node__name"],
                row["device__index"],
                row["device__device_type__name"],
            )
            points[device_id] = []
        points[device_id].append(GpuUsePoint(at, utilization, memory))

    device_fields = (
        "device_id",
        "device__node__name",
        "device__index",
        "device__device_type__name",
    )
    minutes = (
        JobGpuMinute.objects.filter(job=job, minute__gte=start)
        .values(*device_fields, "minute", "utilization_avg", "memory_used_max_mb")
        .order_by("minute", "device_id")
    )
    for row in minutes:
        add(row, row["minute"], row["utilization_avg"], row["memory_used_max_mb"])
    # Raw samples of a minute already rolled up are in that minute's row; only later ones
    # are new. The roll-up handles every job's complete minutes at once, so "after this
    # job's last rolled minute" means "not rolled up yet".
    raw_since = max(start, last_minute + MINUTE) if last_minute else start
    samples = (
        JobGpuSample.objects.filter(job=job, at__gte=raw_since)
        .values(*device_fields, "at", "utilization_pct", "memory_used_mb")
        .order_by("at", "device_id")
    )
    for row in samples:
        add(row, row["at"], row["utilization_pct"], row["memory_used_mb"])
    uses = []
    for device_id, (node, index, type_name) in sorted(devices.items(), key=lambda d: d[1]):
        bucketed, step = _bucketed(points[device_id], max_points)
        uses.append(DeviceGpuUse(device_id, f"{node}/{index} ({type_name})", bucketed, step))
    return uses


def _bucketed(points: list[GpuUsePoint], max_points: int) -> tuple[list[GpuUsePoint], timedelta]:
    """At most about `max_points` points: mean utilization and peak memory per bucket.

    Buckets are whole minutes aligned to the epoch, not to the first point, so the points
    stay put when auto-refresh slides the window forward.
    """
    if len(points) <= max_points:
        return points, MINUTE
    span = (points[-1].at - points[0].at).total_seconds()
    width = max(math.ceil(span / max_points / 60), 1) * 60
    buckets: dict[int, list[GpuUsePoint]] = {}
    for point in points:
        buckets.setdefault(int(point.at.timestamp() // width), []).append(point)
    merged = []
    for index in sorted(buckets):
        group = buckets[index]
        readings = [p.utilization_pct for p in group if p.utilization_pct is not None]
        merged.append(
            GpuUsePoint(
                at=datetime.fromtimestamp(index * width, tz=UTC),
                utilization_pct=sum(readings) / len(readings) if readings else None,
                memory_used_mb=max(p.memory_used_mb for p in group),
            )
        )
    return merged, timedelta(seconds=width)


@dataclass(frozen=True)
class SessionAccess:
    """Where a running interactive session listens, as its viewer may see it."""

    node: str
    address: str
    port: int
    url: str  # what to open: the node's port, or localhost's through the tunnel
    tunnel: str  # `ssh -N -L …` through GPULAB_SESSION_GATEWAY; "" without a gateway
    token: str | None  # the owner's only; None for anyone else (an admin too)


def sessions_access(*, jobs: Sequence[Job], viewer: User) -> dict[int, SessionAccess]:
    """The address of each session in `jobs` that holds GPUs and has its port (one query
    for all of them). The token is shown to the session's owner only: it opens their
    notebook as them, which no one else (an admin neither) needs to do."""
    live = [
        job
        for job in jobs
        if job.interactive and job.state in HOLDING_STATES and job.session_port is not None
    ]
    if not live:
        return {}
    node_of: dict[int, tuple[str, str]] = {}
    for job_id, name, address in (
        Allocation.objects.filter(job__in=live, ended_at__isnull=True)
        .order_by("job_id", "device_id")
        .values_list("job_id", "device__node__name", "device__node__address")
    ):
        node_of.setdefault(job_id, (name, address))
    gateway = settings.GPULAB_SESSION_GATEWAY
    access: dict[int, SessionAccess] = {}
    for job in live:
        if job.pk not in node_of:
            continue
        name, address = node_of[job.pk]
        port = job.session_port
        assert port is not None  # filtered above
        # An IPv6 address is bracketed in a URL and in ssh's -L, as agents.ssh does.
        bracketed = f"[{address}]" if ":" in address else address
        host = "localhost" if gateway else bracketed
        access[job.pk] = SessionAccess(
            node=name,
            address=address,
            port=port,
            url=f"http://{host}:{port}/",
            tunnel=(
                f"ssh -N -L {port}:{shlex.quote(bracketed)}:{port} {shlex.quote(gateway)}"
                if gateway
                else ""
            ),
            token=job.session_token if job.owner_id == viewer.pk else None,
        )
    return access


def job_has_run_before(job_id: int) -> bool:
    """Whether the job was RUNNING before the run that just began (call it once the run's
    event is written). Its history, not its `attempt`: an attempt lost while its container
    was launching never ran. The group's chat and the owner's mail tell a first start only:
    under LAS a job is resumed many times."""
    return JobEvent.objects.filter(job_id=job_id, to_state=JobState.RUNNING).count() > 1
