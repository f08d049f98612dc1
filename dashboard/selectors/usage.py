"""Reads behind the usage report: GPU-hours per user and per group, by device type, and
how long their jobs waited to start.

GPU-hours come from the hourly `UsageHour` aggregate only (style.md rule 24): two grouped
queries whatever the size of the job history. Waits are read from the jobs that first
started in the range (one indexed query on `first_started_at`). For lab admins, and for
group coordinators scoped to the groups they coordinate (`usage_scope_for`, as Slurm's
`sreport` shows an account coordinator their accounts); the views enforce that.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.core.exceptions import PermissionDenied
from django.db.models import Q, Sum
from django.utils import timezone

from accounts.models import LabGroup, User
from cluster.models import DeviceType
from dashboard.models import UsageHour
from jobs.models import Job

from .fairness import NO_GROUP

# Spreadsheets run a cell that starts with one of these as a formula (CSV injection).
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class UsageCell:
    gpu_hours: float = 0.0
    normalized_hours: float = 0.0


@dataclass(frozen=True)
class WaitStats:
    """How long the jobs that first started in the range waited for it: from submission to
    their first start (a dependency's hold, an array's cap and a retry's backoff included,
    as Slurm's submit-to-start)."""

    started: int
    mean_seconds: float
    median_seconds: float
    p95_seconds: float


@dataclass(frozen=True)
class UsageLine:
    """One user or group: hours per device type (in the report's column order), and total;
    and the waits of its jobs that started in the range (None: none did)."""

    kind: str  # "user" | "group"
    name: str
    cells: list[UsageCell]
    total: UsageCell
    waits: WaitStats | None = None


@dataclass(frozen=True)
class UsageReport:
    start: date
    end: date
    device_types: list[str]
    users: list[UsageLine]
    groups: list[UsageLine]
    # Column totals (one per device type) and the grand total; the same over users or groups.
    type_totals: list[UsageCell] = field(default_factory=list)
    total: UsageCell = UsageCell()
    waits: WaitStats | None = None  # every job that first started in the range
    # The coordinated groups' names when the report covers only them; None: the whole lab.
    scope: tuple[str, ...] | None = None

    @property
    def users_with_usage(self) -> int:
        """Users who held GPUs in the range (the tables also list those who only started a
        job whose hours are not aggregated yet)."""
        return sum(1 for line in self.users if line.total.gpu_hours > 0)


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def _total(cells: list[UsageCell]) -> UsageCell:
    return UsageCell(
        sum(cell.gpu_hours for cell in cells), sum(cell.normalized_hours for cell in cells)
    )


def _lines(
    kind: str,
    rows: list[tuple[str, str, float, float]],
    device_types: list[str],
    waits: dict[str, WaitStats],
) -> list[UsageLine]:
    per_name: dict[str, dict[str, UsageCell]] = defaultdict(dict)
    for name, device_type, gpu_seconds, service in rows:
        per_name[name][device_type] = UsageCell(gpu_seconds / 3600, service / 3600)
    for name in waits:  # started a job, but its hours are not aggregated yet
        per_name.setdefault(name, {})
    lines = []
    for name, by_type in sorted(per_name.items()):
        # Zeros where it used nothing, so every row has one cell per column.
        cells = [by_type.get(device_type, UsageCell()) for device_type in device_types]
        lines.append(
            UsageLine(kind=kind, name=name, cells=cells, total=_total(cells), waits=waits.get(name))
        )
    return lines


def _wait_stats(waits: list[float]) -> WaitStats:
    ordered = sorted(waits)
    # Nearest rank: the wait 95 % of these jobs did not exceed.
    p95 = ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]
    return WaitStats(
        started=len(ordered),
        mean_seconds=statistics.fmean(ordered),
        median_seconds=statistics.median(ordered),
        p95_seconds=p95,
    )


def usage_scope_for(viewer: User) -> frozenset[int] | None:
    """The groups whose usage `viewer` may read: None (the whole lab) for a lab admin, the
    groups they coordinate for a coordinator. Anyone else may not read the report."""
    if viewer.is_lab_admin:
        return None
    if viewer.coordinated_group_ids:
        return viewer.coordinated_group_ids
    raise PermissionDenied("The usage report is for lab admins and group coordinators.")


def _in_scope(group_ids: frozenset[int] | None) -> Q:
    return Q() if group_ids is None else Q(group_id__in=group_ids)


def _waits(
    start: datetime, end: datetime, group_ids: frozenset[int] | None
) -> tuple[dict[str, WaitStats], dict[str, WaitStats], WaitStats | None]:
    """Waits of the jobs charged to `group_ids` (None: every job) that first started in
    [start, end): per owner, per group, all."""
    per_user: dict[str, list[float]] = defaultdict(list)
    per_group: dict[str, list[float]] = defaultdict(list)
    everyone: list[float] = []
    for owner, group, submitted, started in Job.objects.filter(
        _in_scope(group_ids), first_started_at__gte=start, first_started_at__lt=end
    ).values_list("owner__username", "group__name", "submitted_at", "first_started_at"):
        wait = max((started - submitted).total_seconds(), 0.0)
        per_user[owner].append(wait)
        per_group[group or NO_GROUP].append(wait)
        everyone.append(wait)
    return (
        {name: _wait_stats(waits) for name, waits in per_user.items()},
        {name: _wait_stats(waits) for name, waits in per_group.items()},
        _wait_stats(everyone) if everyone else None,
    )


def usage_report(*, start: date, end: date, group_ids: frozenset[int] | None = None) -> UsageReport:
    """GPU-hours and normalized GPU-hours from `start` to `end` (both days included).

    Days are those of the configured time zone, and exact: usage rows start on its local
    hours, so local midnight never falls inside one. Hours held without a group are reported
    under the group "(no group)", so the group table adds up to the user table.

    With `group_ids` (a coordinator's scope, `usage_scope_for`), only the hours and jobs
    charged to those groups count: a member's row then holds what they ran for these
    groups, never what they ran for another one.
    """
    # One grouped scan by ids (user x group x type: a few hundred rows), summed both ways
    # here; names are looked up afterwards, since joining every hourly row to three tables
    # before grouping costs more than twice as much (measured on a month of 60 users).
    cells = list(
        UsageHour.objects.filter(
            _in_scope(group_ids),
            hour__gte=_day_start(start),
            hour__lt=_day_start(end + timedelta(days=1)),
        )
        .order_by()
        .values_list("user_id", "group_id", "device_type_id")
        .annotate(gpu=Sum("gpu_seconds"), service=Sum("service"))
    )
    user_names = dict(
        User.objects.filter(pk__in={cell[0] for cell in cells}).values_list("id", "username")
    )
    group_names = dict(
        LabGroup.objects.filter(pk__in={cell[1] for cell in cells} - {None}).values_list(
            "id", "name"
        )
    )
    type_names = dict(DeviceType.objects.values_list("id", "name"))
    per_user: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    per_group: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for user_id, group_id, type_id, gpu, service in cells:
        device_type = type_names.get(type_id, str(type_id))
        group_name = NO_GROUP if group_id is None else group_names.get(group_id, str(group_id))
        for totals, name in (
            (per_user, user_names.get(user_id, str(user_id))),
            (per_group, group_name),
        ):
            totals[(name, device_type)][0] += gpu or 0.0
            totals[(name, device_type)][1] += service or 0.0
    user_rows = [(name, type_, gpu, service) for (name, type_), (gpu, service) in per_user.items()]
    group_rows = [
        (name, type_, gpu, service) for (name, type_), (gpu, service) in per_group.items()
    ]
    device_types = sorted({device_type for _, device_type, _, _ in user_rows})
    user_waits, group_waits, all_waits = _waits(
        _day_start(start), _day_start(end + timedelta(days=1)), group_ids
    )
    users = _lines("user", user_rows, device_types, user_waits)
    type_totals = [
        _total([line.cells[index] for line in users]) for index in range(len(device_types))
    ]
    return UsageReport(
        start=start,
        end=end,
        device_types=device_types,
        users=users,
        groups=_lines("group", group_rows, device_types, group_waits),
        type_totals=type_totals,
        total=_total(type_totals),
        waits=all_waits,
        scope=None
        if group_ids is None
        else tuple(
            LabGroup.objects.filter(pk__in=group_ids)
            .order_by("name")
            .values_list("name", flat=True)
        ),
    )


def csv_safe(value: object) -> str:
    """A cell a spreadsheet shows as text: a leading = + - @ (a formula) gets a quote first."""
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_PREFIXES) else text


def usage_report_csv(report: UsageReport) -> str:
    """The report's table as CSV: one row per user, then per group, then the total row.

    Columns: kind, name, then GPU-hours and normalized GPU-hours per device type, then the
    totals, then the jobs that first started in the range and their mean, median and 95th
    percentile wait in hours (empty where none started). Numbers are rounded to 0.001 h
    (3.6 s). Every cell goes through `csv_safe`: user and group names come from people and
    must never run in a spreadsheet.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    header = ["kind", "name"]
    for name in report.device_types:
        header += [f"{name} GPU-hours", f"{name} normalized GPU-hours"]
    header += ["total GPU-hours", "total normalized GPU-hours"]
    header += ["jobs started", "mean wait hours", "median wait hours", "p95 wait hours"]
    writer.writerow([csv_safe(cell) for cell in header])

    def numbers(cells: list[UsageCell]) -> list[str]:
        return [
            f"{value:.3f}" for cell in cells for value in (cell.gpu_hours, cell.normalized_hours)
        ]

    def waits(stats: WaitStats | None) -> list[str]:
        if stats is None:
            return ["0", "", "", ""]
        hours = (stats.mean_seconds, stats.median_seconds, stats.p95_seconds)
        return [str(stats.started), *(f"{seconds / 3600:.3f}" for seconds in hours)]

    for line in [*report.users, *report.groups]:
        row = [line.kind, line.name, *numbers([*line.cells, line.total]), *waits(line.waits)]
        writer.writerow([csv_safe(cell) for cell in row])
    total = ["total", "all", *numbers([*report.type_totals, report.total]), *waits(report.waits)]
    writer.writerow(total)
    return buffer.getvalue()
