"""How much of the cluster is allocated, how much of that is used, and by whom.

Reads the dashboard aggregates (style.md rule 24): `UtilizationSample` for allocated vs
used over time, `UsageHour` for GPU-hours per user and group, `DeviceUtilizationBucket`
for the per-GPU heatmap. The one live read is the idle-but-allocated list, which looks at
the last 15 minutes of per-job GPU use of the jobs running now (a small, indexed read).

Visibility: GPU-hours per group are shown to everyone; per user, a student sees their own
row and one "other users" row, never another student by name. In the idle list a student
sees only their own jobs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta

from django.db.models import Avg, BigIntegerField, Count, F, Func, Max, Q, Sum
from django.db.models.functions import TruncDay
from django.utils import timezone

from accounts.models import User
from agents.selectors import jobs_gpu_use
from cluster.models import Device
from jobs.choices import JobState
from jobs.models import Allocation
from jobs.selectors import job_visible_to

from ..models import DeviceUtilizationBucket, UsageHour, UtilizationSample
from ..services import BUCKET, HOUR, floor_bucket, floor_hour
from .cluster import age_text

HEATMAP_SPAN = timedelta(hours=24)
IDLE_WINDOW = timedelta(minutes=15)
IDLE_THRESHOLD_PCT = 10.0
OTHERS_LABEL = "Other users"
NO_GROUP_LABEL = "No group"


@dataclass(frozen=True)
class Window:
    """A time window of the page: its span, how finely allocated/used is averaged (at most
    ~600 points a series), and whether GPU-hours are stacked per hour or per day.

    A window is a whole number of local hours or days ending with the current one (see
    `window_start`); `covers` says so wherever the window is named.
    """

    key: str
    label: str
    span: timedelta
    series_bucket: timedelta
    usage_period: str  # "hour" or "day"
    covers: str


WINDOWS: dict[str, Window] = {
    window.key: window
    for window in (
        Window(
            key="24h",
            label="24 h",
            span=timedelta(hours=24),
            series_bucket=timedelta(minutes=5),  # 288 points
            usage_period="hour",
            covers="last 24 hours, this hour included",
        ),
        Window(
            key="7d",
            label="7 d",
            span=timedelta(days=7),
            series_bucket=timedelta(minutes=30),  # 336 points
            usage_period="day",
            covers="last 7 days, today included",
        ),
        Window(
            key="30d",
            label="30 d",
            span=timedelta(days=30),
            series_bucket=timedelta(hours=2),  # 360 points
            usage_period="day",
            covers="last 30 days, today included",
        ),
    )
}
DEFAULT_WINDOW = WINDOWS["24h"]


def window_get(key: str | None) -> Window | None:
    """The window named `key` ('24h', '7d', '30d'), or None for anything else."""
    return WINDOWS.get(key or "")


# --------------------------------------------------------------------------- allocated vs used


class _EpochBucket(Func):
    """The index of the `seconds`-long time bucket a timestamp falls in (floor of epoch/seconds).

    Computed in the database, so a 30-day window sends a few hundred averaged rows per
    device type to Python instead of tens of thousands of samples. PostgreSQL and SQLite
    (the demo) spell it differently.
    """

    output_field = BigIntegerField()

    def __init__(self, expression: str, *, seconds: int) -> None:
        if int(seconds) <= 0:
            raise ValueError("A bucket lasts at least one second.")
        self.seconds = int(seconds)  # an int, so safe to write into the SQL
        super().__init__(F(expression))

    def as_sql(self, compiler, connection, **extra):  # type: ignore[no-untyped-def, override]
        template = f"CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / {self.seconds}) AS BIGINT)"
        return super().as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):  # type: ignore[no-untyped-def]
        # '%%%%s' becomes '%%s' here and '%s' once the SQLite backend unescapes the query.
        template = f"(CAST(STRFTIME('%%%%s', %(expressions)s) AS INTEGER) / {self.seconds})"
        return super().as_sql(compiler, connection, template=template, **extra)


@dataclass(frozen=True)
class SeriesPoint:
    at: datetime  # start of the bucket
    devices: int
    allocated: float  # mean GPUs allocated over the bucket
    allocated_peak: int  # most GPUs allocated at one sample of the bucket
    used: float  # mean GPUs' worth of utilization (two GPUs at 50 % = 1.0), any GPU
    # Mean GPUs' worth of utilization of the allocated GPUs only; None where a sample of
    # the bucket predates that reading (migration 0004): a part would not be a mean.
    used_allocated: float | None


@dataclass(frozen=True)
class TypeSeries:
    device_type: str
    points: list[SeriesPoint]

    @property
    def devices(self) -> int:
        return self.points[-1].devices if self.points else 0

    @property
    def allocated_mean(self) -> float:
        return sum(p.allocated for p in self.points) / len(self.points) if self.points else 0.0

    @property
    def used_mean(self) -> float:
        return sum(p.used for p in self.points) / len(self.points) if self.points else 0.0

    @property
    def allocated_peak(self) -> int:
        """The most GPUs allocated at any one sample (not the peak of bucket means)."""
        return max((p.allocated_peak for p in self.points), default=0)

    @property
    def used_of_allocated_pct(self) -> float | None:
        """How busy the allocated GPUs were: their use as a share of the GPUs allocated.

        Over the buckets that measured the allocated GPUs' use only: a free GPU's load, or
        a cancelled job's process still stopping, is not use of an allocation. None if no
        such bucket had a GPU allocated.
        """
        measured = [p for p in self.points if p.used_allocated is not None]
        allocated = sum(p.allocated for p in measured)
        if allocated <= 0:
            return None
        return 100.0 * sum(p.used_allocated or 0.0 for p in measured) / allocated


def allocation_series(*, window: Window, now: datetime | None = None) -> list[TypeSeries]:
    """Allocated and used GPUs per device type over `window`, averaged per `series_bucket`.

    From `window_start` to `now`, like the window's GPU-hours. One grouped query over
    UtilizationSample; a bucket with no sample (the task did not run) is simply absent, so
    the chart shows a gap in time rather than a false zero.
    """
    now = now or timezone.now()
    seconds = int(window.series_bucket.total_seconds())
    rows = (
        UtilizationSample.objects.filter(at__gte=window_start(window=window, now=now), at__lte=now)
        .annotate(bucket=_EpochBucket("at", seconds=seconds))
        .values("device_type__name", "bucket")
        .annotate(
            devices_max=Max("devices"),
            allocated_avg=Avg("allocated"),
            allocated_max=Max("allocated"),
            used_avg=Avg("used"),
            used_allocated_avg=Avg("used_allocated"),
            unmeasured=Count("id", filter=Q(used_allocated__isnull=True)),
        )
        .order_by("device_type__name", "bucket")
    )
    series: dict[str, list[SeriesPoint]] = {}
    for row in rows:
        used_allocated = row["used_allocated_avg"]
        series.setdefault(row["device_type__name"], []).append(
            SeriesPoint(
                at=datetime.fromtimestamp(row["bucket"] * seconds, tz=UTC),
                devices=row["devices_max"],
                allocated=round(row["allocated_avg"], 3),
                allocated_peak=row["allocated_max"],
                used=round(row["used_avg"], 3),
                used_allocated=(
                    round(used_allocated, 3)
                    if used_allocated is not None and not row["unmeasured"]
                    else None
                ),
            )
        )
    return [TypeSeries(device_type=name, points=points) for name, points in series.items()]


# --------------------------------------------------------------------------- GPU-hours


@dataclass(frozen=True)
class UsageSeries:
    """GPU-hours of one user, one group, or all other users, per period of the window."""

    label: str
    gpu_hours: list[float]  # one value per period of UsageBreakdown.periods
    user: str | None = None  # the user name, when the viewer may see it
    mine: bool = False
    others: bool = False

    @property
    def total(self) -> float:
        return round(sum(self.gpu_hours), 2)


@dataclass(frozen=True)
class UsageBreakdown:
    period: str  # "hour" or "day"
    periods: list[datetime]  # start of each period, oldest first
    by_user: list[UsageSeries]
    by_group: list[UsageSeries]

    @property
    def total(self) -> float:
        return round(sum(series.total for series in self.by_group), 2)


def _periods(*, window: Window, now: datetime) -> list[datetime]:
    """Start of every period of the window: the last 24 local hours (this one included), or
    the last 7 or 30 local days (today included)."""
    if window.usage_period == "hour":
        starts = [floor_hour(now)]
        while len(starts) < int(window.span / HOUR):
            # The hour before: where the hour holding the instant just before this one began.
            starts.insert(0, floor_hour(starts[0] - timedelta(microseconds=1)))
        return starts
    today = timezone.localdate(now)
    days = window.span.days
    return [
        timezone.make_aware(datetime.combine(today - timedelta(days=days - 1 - i), time.min))
        for i in range(days)
    ]


def window_start(*, window: Window, now: datetime) -> datetime:
    """Where `window` begins as of `now`: the start of its first hour (24 h) or local day.

    Every figure of the window and the fairness page's shares start here, so "last 7 days"
    means the same span everywhere: the 6 local days before today, and today so far.
    """
    return _periods(window=window, now=now)[0]


def usage_breakdown(*, viewer: User, window: Window, now: datetime | None = None) -> UsageBreakdown:
    """GPU-hours per user and per group for each hour (24 h) or local day (7 d, 30 d).

    1. Two grouped queries over UsageHour: per (period, user) and per (period, group).
    2. For a student, every user but themselves is summed into one "other users" series.
    Series are sorted by their total, largest first (the viewer's own row first).
    """
    now = now or timezone.now()
    periods = _periods(window=window, now=now)
    index = {period: i for i, period in enumerate(periods)}
    hours = UsageHour.objects.filter(hour__gte=periods[0], hour__lte=now)
    if window.usage_period == "hour":
        hours = hours.annotate(period=F("hour"))
    else:
        hours = hours.annotate(period=TruncDay("hour"))

    def collect(key_fields: tuple[str, ...]) -> dict[tuple, list[float]]:
        values: dict[tuple, list[float]] = defaultdict(lambda: [0.0] * len(periods))
        rows = (
            hours.values("period", *key_fields)
            .annotate(seconds=Sum("gpu_seconds"))
            .order_by()
            .values_list("period", *key_fields, "seconds")
        )
        for period, *key, seconds in rows:
            i = index.get(period)
            if i is not None:
                values[tuple(key)][i] += seconds / 3600.0
        return values

    by_user: list[UsageSeries] = []
    others = [0.0] * len(periods)
    has_others = False
    for (user_id, username), values in collect(("user_id", "user__username")).items():
        rounded = [round(value, 3) for value in values]
        mine = user_id == viewer.pk
        if mine or viewer.is_lab_admin:
            by_user.append(UsageSeries(label=username, gpu_hours=rounded, user=username, mine=mine))
        else:
            has_others = True
            others = [a + b for a, b in zip(others, values, strict=True)]
    by_user.sort(key=lambda series: (not series.mine, -series.total, series.label))
    if has_others:
        by_user.append(
            UsageSeries(
                label=OTHERS_LABEL, gpu_hours=[round(value, 3) for value in others], others=True
            )
        )
    by_group = sorted(
        (
            UsageSeries(
                label=name or NO_GROUP_LABEL, gpu_hours=[round(value, 3) for value in values]
            )
            for (name,), values in collect(("group__name",)).items()
        ),
        key=lambda series: (-series.total, series.label),
    )
    return UsageBreakdown(
        period=window.usage_period, periods=periods, by_user=by_user, by_group=by_group
    )


def usage_breakdown_redacted(full: UsageBreakdown, *, viewer: User) -> UsageBreakdown:
    """`viewer`'s view of the shared admin breakdown (built once per aggregation run).

    A student: own row by name, everyone else summed, the same result as
    `usage_breakdown(viewer=student)` without reading the table again. An admin: every row,
    with only their own marked `mine` (the shared one was built with no viewer's row
    marked, or with another admin's), in the shared order, which the shared figures follow.
    """
    if viewer.is_lab_admin:
        by_user = [
            replace(s, mine=s.user is not None and s.user == viewer.username) for s in full.by_user
        ]
        return replace(full, by_user=by_user)
    mine = [
        UsageSeries(label=s.label, gpu_hours=s.gpu_hours, user=s.user, mine=True)
        for s in full.by_user
        if s.user == viewer.username
    ]
    rest = [s for s in full.by_user if s.user != viewer.username]
    by_user = list(mine)
    if rest:
        summed = [
            round(sum(values), 3) for values in zip(*(s.gpu_hours for s in rest), strict=True)
        ]
        by_user.append(UsageSeries(label=OTHERS_LABEL, gpu_hours=summed, others=True))
    return UsageBreakdown(
        period=full.period, periods=full.periods, by_user=by_user, by_group=full.by_group
    )


# --------------------------------------------------------------------------- heatmap


@dataclass(frozen=True)
class DeviceRow:
    label: str  # "node/index", or "node/index (retired HH:MM)" for a replaced GPU
    device_type: str
    values: list[float | None]  # mean utilization % per bucket; None: no reading
    mean: float | None  # over the 24 h, weighted by samples


@dataclass(frozen=True)
class Heatmap:
    starts: list[datetime]  # start of each 15-minute bucket, oldest first
    rows: list[DeviceRow]


def device_heatmap(*, now: datetime | None = None) -> Heatmap:
    """Every device's mean utilization per 15-minute bucket over the last 24 hours.

    Two reads: the devices (with node names, for the labels) and their buckets.
    """
    now = now or timezone.now()
    count = int(HEATMAP_SPAN / BUCKET)
    last = floor_bucket(now)
    starts = [last - BUCKET * (count - 1 - i) for i in range(count)]
    column = {start: i for i, start in enumerate(starts)}
    # A GPU retired within the window keeps its row: its cells are history.
    devices = (
        Device.all_objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gte=starts[0]))
        .order_by("node__name", "index", "id")
        .values_list("id", "node__name", "index", "device_type__name", "retired_at")
    )
    cells: dict[int, list[float | None]] = {}
    weights: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    buckets = DeviceUtilizationBucket.objects.filter(
        start__gte=starts[0], start__lte=now
    ).values_list("device_id", "start", "utilization_avg", "samples")
    for device_id, start, utilization, samples in buckets:
        i = column.get(start)
        if i is None or utilization is None:
            continue
        cells.setdefault(device_id, [None] * count)[i] = round(utilization, 1)
        weights[device_id][0] += utilization * samples
        weights[device_id][1] += samples
    rows = []
    for device_id, node_name, device_index, type_name, retired_at in devices:
        total, samples = weights.get(device_id, (0.0, 0.0))
        label = f"{node_name}/{device_index}"
        if retired_at is not None:
            # Its replacement holds the same node/index: a label of its own keeps the two
            # rows apart (the chart draws rows of one label into one band).
            label += f" (retired {timezone.localtime(retired_at):%H:%M})"
        rows.append(
            DeviceRow(
                label=label,
                device_type=type_name,
                values=cells.get(device_id, [None] * count),
                mean=round(total / samples, 1) if samples else None,
            )
        )
    return Heatmap(starts=starts, rows=rows)


# --------------------------------------------------------------------------- idle but allocated


@dataclass(frozen=True)
class IdleJob:
    job_id: int
    name: str
    owner: str
    gpus: int
    devices: list[str]  # "node/index" of each device it holds
    held_seconds: float
    utilization_avg: float  # mean over the GPUs it holds, last IDLE_WINDOW

    @property
    def held_text(self) -> str:
        return age_text(self.held_seconds)


@dataclass(frozen=True)
class IdleAllocated:
    jobs: list[IdleJob]  # below IDLE_THRESHOLD_PCT, least used first
    running: int  # running jobs holding devices that the viewer may see
    without_readings: int  # of those, how many reported no per-job GPU use in the window


def idle_allocated_jobs(*, viewer: User, now: datetime | None = None) -> IdleAllocated:
    """Running jobs that hold GPUs but used them less than IDLE_THRESHOLD_PCT lately.

    1. The live allocations of RUNNING jobs (a student's own jobs only).
    2. Their per-job GPU use over the last IDLE_WINDOW (`agents.selectors.jobs_gpu_use`):
       the mean over every GPU a job holds, a held GPU it does not use counting as 0 %.
       A job with no reading at all is not judged (it is counted in `without_readings`):
       its node's agent may not report per-job use.
    """
    now = now or timezone.now()
    since = now - IDLE_WINDOW
    allocations = Allocation.objects.filter(ended_at__isnull=True, job__state=JobState.RUNNING)
    if not viewer.is_lab_admin:
        allocations = allocations.filter(job__in=job_visible_to(user=viewer))
    jobs: dict[int, dict] = {}
    for job_id, name, owner, device_id, node_name, index, started_at in allocations.order_by(
        "job_id", "device__node__name", "device__index"
    ).values_list(
        "job_id",
        "job__name",
        "job__owner__username",
        "device_id",
        "device__node__name",
        "device__index",
        "started_at",
    ):
        job = jobs.setdefault(
            job_id,
            {"name": name, "owner": owner, "devices": {}, "since": started_at},
        )
        job["devices"][device_id] = f"{node_name}/{index}"
        job["since"] = min(job["since"], started_at)
    if not jobs:
        return IdleAllocated(jobs=[], running=0, without_readings=0)

    use = jobs_gpu_use(
        held={job_id: list(job["devices"]) for job_id, job in jobs.items()},
        since=dict.fromkeys(jobs, since),
        now=now,
    )
    idle = []
    without_readings = 0
    for job_id, job in jobs.items():
        average = use[job_id]
        if average is None:
            without_readings += 1
            continue
        if average < IDLE_THRESHOLD_PCT:
            held = job["devices"]
            idle.append(
                IdleJob(
                    job_id=job_id,
                    name=job["name"],
                    owner=job["owner"],
                    gpus=len(held),
                    devices=list(held.values()),
                    held_seconds=max(0.0, (now - job["since"]).total_seconds()),
                    utilization_avg=round(average, 1),
                )
            )
    idle.sort(key=lambda job: (job.utilization_avg, -job.held_seconds, job.job_id))
    return IdleAllocated(jobs=idle, running=len(jobs), without_readings=without_readings)
