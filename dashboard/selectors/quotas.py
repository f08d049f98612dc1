"""A user's quotas as Slurm's `sshare`/`sacctmgr show assoc` or Run:ai's quota view show
them: what the user's own account and each of their lab groups use now, against its limits.

Usage is counted as the scheduler counts it (`scheduler.policies.fairness.QuotaLedger`):
GPUs and jobs in the holding states (starting, running, preempting); pending jobs as
`jobs.services._check_pending_quota` counts them at submission; GPUs per type from live
allocations. A user's row counts the user's own jobs in any group; a group's row counts
every job charged to the group, whoever submitted it, since that is what its limits cap.

Only the viewer's own accounts are read (their user account, the groups they belong to or
coordinate): another user's numbers are never in the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from accounts.models import DeviceTypeQuota, LabGroup, User
from jobs.choices import HOLDING_STATES, JobState
from jobs.models import Allocation, Job

AT_LIMIT = "at limit"
OVER_LIMIT = "over limit"


def limit_mark(used: int, limit: int | None) -> str:
    """The marker of a count against its limit: "at limit" when nothing more fits, "over
    limit" past it (an admin lowered the limit below what already runs), "" below it or
    without a limit."""
    if limit is None or used < limit:
        return ""
    return AT_LIMIT if used == limit else OVER_LIMIT


@dataclass(frozen=True)
class TypeQuotaStatus:
    """One per-device-type cap of an account and the GPUs of that type it holds now."""

    device_type: str
    gpus_in_use: int
    max_gpus: int

    @property
    def mark(self) -> str:
        return limit_mark(self.gpus_in_use, self.max_gpus)

    @property
    def at_limit(self) -> bool:
        return bool(self.mark)


@dataclass(frozen=True)
class QuotaStatus:
    """One account (the user's own, or one of their groups): usage against its limits.

    A limit of None is no limit. `guaranteed_gpus` is None for users and for groups
    without a guarantee; `borrowed_gpus` (what runs beyond the guarantee, reclaimable by
    other groups' guarantees) is None wherever `guaranteed_gpus` is.
    """

    kind: str  # "user" or "group"
    name: str
    weight: float
    gpus_in_use: int
    max_gpus: int | None
    guaranteed_gpus: int | None
    borrowed_gpus: int | None
    running_jobs: int
    max_running_jobs: int | None
    pending_jobs: int
    max_pending_jobs: int | None
    device_types: tuple[TypeQuotaStatus, ...]

    @property
    def gpus_mark(self) -> str:
        return limit_mark(self.gpus_in_use, self.max_gpus)

    @property
    def running_mark(self) -> str:
        return limit_mark(self.running_jobs, self.max_running_jobs)

    @property
    def pending_mark(self) -> str:
        return limit_mark(self.pending_jobs, self.max_pending_jobs)

    @property
    def at_limit(self) -> list[str]:
        """The limits reached or passed, named as the audit log names them
        (`max_gpus[<type>]` for a type's cap)."""
        reached = [
            name
            for name, mark in (
                ("max_gpus", self.gpus_mark),
                ("max_running_jobs", self.running_mark),
                ("max_pending_jobs", self.pending_mark),
            )
            if mark
        ]
        return reached + [f"max_gpus[{row.device_type}]" for row in self.device_types if row.mark]


def _tallies(jobs_of: str) -> dict[str, Any]:
    """GPUs in use, running and pending jobs of the account row, as correlated subqueries
    on the jobs whose `jobs_of` field ("owner" or "group") is that row."""
    jobs = Job.objects.filter(**{jobs_of: OuterRef("pk")}).order_by()
    holding = jobs.filter(state__in=HOLDING_STATES).values(jobs_of)
    pending = jobs.filter(state=JobState.PENDING).values(jobs_of)

    def scalar(rows: QuerySet, aggregate: Any) -> Coalesce:
        # values(jobs_of) then annotate: GROUP BY the one account, so one row (or none: 0).
        return Coalesce(Subquery(rows.annotate(n=aggregate).values("n")), 0)

    return {
        "gpus_in_use": scalar(holding, Sum("num_gpus")),
        "running_jobs": scalar(holding, Count("pk")),
        "pending_jobs": scalar(pending, Count("pk")),
    }


# The columns of both halves of the accounts query, in one order: a UNION pairs them by
# position.
_ACCOUNT_COLUMNS = (
    "pk",
    "weight",
    "max_gpus",
    "max_running_jobs",
    "max_pending_jobs",
    "kind",
    "account_name",
    "guaranteed",
    "gpus_in_use",
    "running_jobs",
    "pending_jobs",
)


def _group_ids_of(user: User) -> QuerySet:
    """The groups whose quotas `user` sees (a subquery): those they belong to, and those
    they coordinate, whose limits cap the jobs they watch over."""
    return LabGroup.objects.filter(Q(members=user) | Q(coordinators=user)).values("pk")


def quota_status(*, user: User) -> list[QuotaStatus]:
    """`user`'s own account, then each of their lab groups (member or coordinator) by name,
    with usage and limits.

    Two queries however many jobs, groups and caps there are (the queue page shows this on
    every refresh):
    1. The accounts with their limits and job tallies: the user's row and the groups' rows
       in one UNION, each tally a correlated subquery.
    2. The per-type caps of those accounts, each with the GPUs of that type the account's
       live allocations hold.
    """
    user_row = (
        User.objects.filter(pk=user.pk)
        .annotate(
            kind=Value("user"),
            account_name=F("username"),
            guaranteed=Value(None, output_field=IntegerField()),
            **_tallies("owner"),
        )
        .order_by()  # no ORDER BY inside a UNION's halves (SQLite refuses one)
        .values(*_ACCOUNT_COLUMNS)
    )
    group_rows = (
        LabGroup.objects.filter(pk__in=_group_ids_of(user))
        .annotate(
            kind=Value("group"),
            account_name=F("name"),
            guaranteed=F("guaranteed_gpus"),
            **_tallies("group"),
        )
        .order_by()
        .values(*_ACCOUNT_COLUMNS)
    )
    rows = list(user_row.union(group_rows, all=True))

    # A cap belongs to a user or to a group (never both): comparing the allocation's job
    # with both foreign keys matches the one that is set, as NULL equals nothing.
    held = (
        Allocation.objects.filter(
            ended_at__isnull=True, device__device_type=OuterRef("device_type")
        )
        .filter(Q(job__owner=OuterRef("user")) | Q(job__group=OuterRef("group")))
        .order_by()
        .values("device__device_type")
        .annotate(n=Count("pk"))
        .values("n")
    )
    caps = (
        DeviceTypeQuota.objects.filter(Q(user=user) | Q(group__in=_group_ids_of(user)))
        .annotate(in_use=Coalesce(Subquery(held), 0))
        .order_by("device_type__name")
        .values_list("user_id", "group_id", "device_type__name", "in_use", "max_gpus")
    )
    types_of: dict[tuple[str, int], list[TypeQuotaStatus]] = {}
    for user_id, group_id, type_name, in_use, max_gpus in caps:
        key = ("user", user_id) if user_id is not None else ("group", group_id)
        types_of.setdefault(key, []).append(TypeQuotaStatus(type_name, in_use, max_gpus))

    accounts = [_status(row, tuple(types_of.get((row["kind"], row["pk"]), ()))) for row in rows]
    # The user first, then the groups by name (a UNION keeps no order of its own).
    return sorted(accounts, key=lambda account: (account.kind != "user", account.name))


def _status(row: dict[str, Any], device_types: tuple[TypeQuotaStatus, ...]) -> QuotaStatus:
    guaranteed = row["guaranteed"]
    in_use = row["gpus_in_use"]
    return QuotaStatus(
        kind=row["kind"],
        name=row["account_name"],
        weight=row["weight"],
        gpus_in_use=in_use,
        max_gpus=row["max_gpus"],
        guaranteed_gpus=guaranteed,
        borrowed_gpus=None if guaranteed is None else max(0, in_use - guaranteed),
        running_jobs=row["running_jobs"],
        max_running_jobs=row["max_running_jobs"],
        pending_jobs=row["pending_jobs"],
        max_pending_jobs=row["max_pending_jobs"],
        device_types=device_types,
    )
