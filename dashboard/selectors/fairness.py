"""Reads behind the fairness page and API: shares of GPU-time, entitlements, fair-share order.

Two different questions, two different sources:
- "Who got how much over the window?" reads the hourly `UsageHour` aggregate (style.md
  rule 24), never the job history, so it costs the same with 100 or 100,000 finished jobs.
- "Whom would the scheduler serve first now?" builds the fair-share part of the scheduler's
  snapshot with the scheduler's own rules and pure functions (`decay_usage` with the
  configured half-life, live usage of running jobs, `normalized_usage`), so the page cannot
  drift from the loop: usage / (user weight x group share over the groups with active jobs).

Visibility is decided here, once, for the page and the API alike: students see every group
but only themselves among users (the others are summed as "other users", and appear in the
fair-share order as "another user" with their rank only); admins see every name.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings as django_settings
from django.db.models import Sum
from django.utils import timezone

from accounts.models import LabGroup, User
from dashboard.models import AggregatesState, UsageHour
from jobs.choices import ACTIVE_STATES
from jobs.models import Job
from scheduler.core.types import JobPhase, SchedulerSettings, Snapshot
from scheduler.models import SchedulerConfig
from scheduler.policies.fairness import normalized_usage
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.snapshot import snapshot_build

from .utilization import WINDOWS as USAGE_WINDOWS
from .utilization import window_start

WINDOWS: dict[str, timedelta] = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
DEFAULT_WINDOW = "7d"
NO_GROUP = "(no group)"
OTHER_USERS = "other users"
ANOTHER_USER = "another user"
# Policies whose queue order blends in fair share (scheduler.policies.las.tiresias_order).
FAIR_SHARE_POLICIES = frozenset({"las", "gittins"})


@dataclass(frozen=True)
class ShareRow:
    """One group or user (or "other users"): its share of the window's GPU-time vs its due.

    `share` and `entitled` are fractions of 1. `ratio` = share / entitled: 1 is exactly its
    due, below 1 it got less. `weight` is None on the aggregated "other users" row.
    """

    name: str
    gpu_hours: float
    normalized_hours: float
    share: float
    weight: float | None
    entitled: float
    ratio: float | None
    is_self: bool = False
    is_aggregate: bool = False

    @property
    def share_pct(self) -> float:
        return self.share * 100

    @property
    def entitled_pct(self) -> float:
        return self.entitled * 100


@dataclass(frozen=True)
class OrderRow:
    """One (user, group) with active jobs, in the order fair share would serve them.

    For a student, another user's row carries only `rank`: every other field is None.
    `usage_hours` is decayed normalized GPU-hours; `normalized_usage` is the scheduler's
    key (usage / (user weight x group share)), lowest first. Equal keys share a rank.
    """

    rank: int
    user: str | None
    group: str | None
    is_self: bool
    usage_hours: float | None
    user_weight: float | None
    group_weight: float | None
    group_share: float | None
    normalized_usage: float | None
    pending_jobs: int | None
    running_jobs: int | None

    @property
    def group_share_pct(self) -> float | None:
        return None if self.group_share is None else self.group_share * 100

    @property
    def normalized_hours(self) -> float | None:
        return None if self.normalized_usage is None else self.normalized_usage / 3600


@dataclass(frozen=True)
class FairnessReport:
    window: str
    since: datetime
    now: datetime
    normalized_hours: float
    groups: tuple[ShareRow, ...]
    users: tuple[ShareRow, ...]
    group_jain: float | None
    user_jain: float | None
    order: tuple[OrderRow, ...]
    policy: str
    fairness: float
    half_life_hours: float
    aggregates_at: datetime | None
    names_visible: bool

    @property
    def fair_share_applies(self) -> bool:
        return self.policy in FAIR_SHARE_POLICIES and self.fairness > 0


def window_parse(value: str | None) -> str | None:
    """The window key if `value` is one of WINDOWS, else None."""
    return value if value in WINDOWS else None


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n Σx²): 1 when all equal, 1/n when one takes all.

    None when it is undefined: nobody, or every value 0 (no GPU-time used at all).
    """
    squares = sum(value * value for value in values)
    if not values or squares == 0:
        return None
    return sum(values) ** 2 / (len(values) * squares)


def _normalized(parts: dict[int | None, float]) -> dict[int | None, float]:
    """Each key's part of the whole (negative parts count as 0); all 0 when nothing is due."""
    total = math.fsum(max(part, 0.0) for part in parts.values())
    return {key: max(part, 0.0) / total if total > 0 else 0.0 for key, part in parts.items()}


def _user_entitlements(
    *,
    pairs: Iterable[tuple[int, int | None]],
    user_weights: dict[int | None, float],
    group_weights: dict[int | None, float],
) -> dict[int | None, float]:
    """A user's entitled share, by the scheduler's fair-share rule (`normalized_usage`).

    The scheduler keys each (user, group) pair by the user's *whole* usage ÷ (user weight ×
    that group's share), and serves the lowest key first. A user in two groups is therefore
    served through their better pair, whose key is the lower one: usage ÷ max over their
    pairs of (user weight × group share). The usage it evens out is proportional to that
    best pair's weight, never to the sum over the pairs (summing would promise a two-group
    user more than the scheduler ever gives them). A group's share is not split among its
    members, as the scheduler does not split it either.
    """
    parts: dict[int | None, float] = defaultdict(float)
    for user_id, group_id in pairs:
        weight = max(user_weights[user_id], 0.0) * max(group_weights[group_id], 0.0)
        parts[user_id] = max(parts[user_id], weight)
    return _normalized(parts)


def _share_rows(
    *,
    names: dict[int | None, str],
    weights: dict[int | None, float],
    used: dict[int | None, tuple[float, float]],
    entitled: dict[int | None, float],
    total_service: float,
    self_key: int | None = None,
) -> list[ShareRow]:
    """Share rows of the keys of `entitled`, sorted by name; `used` is key -> (gpu_s, service)."""
    rows = []
    for key, due in entitled.items():
        gpu_seconds, service = used.get(key, (0.0, 0.0))
        share = service / total_service if total_service > 0 else 0.0
        rows.append(
            ShareRow(
                name=names[key],
                gpu_hours=gpu_seconds / 3600,
                normalized_hours=service / 3600,
                share=share,
                weight=weights[key],
                entitled=due,
                ratio=share / due if due > 0 else None,
                is_self=self_key is not None and key == self_key,
            )
        )
    return sorted(rows, key=lambda row: row.name)


def _others_summed(rows: list[ShareRow]) -> list[ShareRow]:
    """A student's view of the user rows: their own row, and everyone else as one row."""
    mine = [row for row in rows if row.is_self]
    others = [row for row in rows if not row.is_self]
    if others:
        share = sum(row.share for row in others)
        entitled = sum(row.entitled for row in others)
        mine.append(
            ShareRow(
                name=OTHER_USERS,
                gpu_hours=sum(row.gpu_hours for row in others),
                normalized_hours=sum(row.normalized_hours for row in others),
                share=share,
                weight=None,
                entitled=entitled,
                ratio=share / entitled if entitled > 0 else None,
                is_aggregate=True,
            )
        )
    return mine


def fairness_report(*, viewer: User, window: str, now: datetime | None = None) -> FairnessReport:
    """Shares over `window` (a WINDOWS key), Jain's indices, and the fair-share order now.

    1. GPU-time per (user, group) from UsageHour since the window's start (`window_start`:
       the start of its first hour, or local day, as on the utilization page; one grouped
       query).
    2. Participants: (user, group) pairs that used anything in the window or have active
       jobs. A group's entitled share = its weight / Σ weights of the participating groups;
       a user's = user weight × group weight of their best pair, normalized over all
       users, which is what the scheduler's fair share evens out (`_user_entitlements`). Jobs
       without a group count as one group of weight 1, as the scheduler counts them.
    3. Jain's index over share / entitled, for groups and for users (over everyone, also
       for a student: the index names nobody).
    4. The fair-share order (`fair_share_order_rows`).
    5. Redaction for students (see the module docstring).
    """
    now = now or timezone.now()
    since = window_start(window=USAGE_WINDOWS[window], now=now)
    names_visible = viewer.is_lab_admin

    # One grouped scan of the window, summed per group and per user here (a few hundred rows).
    by_group: dict[int | None, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    by_user: dict[int | None, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    pairs: set[tuple[int, int | None]] = set()
    cells = (
        UsageHour.objects.filter(hour__gte=since, hour__lte=now)
        .order_by()
        .values_list("user_id", "group_id")
        .annotate(gpu=Sum("gpu_seconds"), service=Sum("service"))
    )
    for user_id, group_id, gpu_seconds, service in cells:
        for totals, key in ((by_group, group_id), (by_user, user_id)):
            gpu_before, service_before = totals[key]
            totals[key] = (gpu_before + (gpu_seconds or 0.0), service_before + (service or 0.0))
        if (service or 0.0) > 0:
            pairs.add((user_id, group_id))
    pairs |= set(
        Job.objects.filter(state__in=ACTIVE_STATES)
        .order_by()
        .values_list("owner_id", "group_id")
        .distinct()
    )
    group_keys = {group_id for _, group_id in pairs}
    user_keys = {user_id for user_id, _ in pairs}

    group_names: dict[int | None, str] = {None: NO_GROUP}
    group_weights: dict[int | None, float] = {None: 1.0}
    for pk, name, weight in LabGroup.objects.filter(pk__in=group_keys - {None}).values_list(
        "id", "name", "weight"
    ):
        group_names[pk], group_weights[pk] = name, weight
    user_names: dict[int | None, str] = {}
    user_weights: dict[int | None, float] = {}
    for pk, name, weight in User.objects.filter(pk__in=user_keys).values_list(
        "id", "username", "weight"
    ):
        user_names[pk], user_weights[pk] = name, weight
    # A row deleted since it was aggregated has no name or weight left: leave it out.
    group_keys &= set(group_names)
    pairs = {(user, group) for user, group in pairs if user in user_names and group in group_keys}

    total_service = sum(service for _, service in by_group.values())
    groups = _share_rows(
        names=group_names,
        weights=group_weights,
        used=by_group,
        entitled=_normalized({key: group_weights[key] for key in group_keys}),
        total_service=total_service,
    )
    users = _share_rows(
        names=user_names,
        weights=user_weights,
        used=by_user,
        entitled=_user_entitlements(
            pairs=pairs, user_weights=user_weights, group_weights=group_weights
        ),
        total_service=total_service,
        self_key=viewer.pk,
    )
    group_jain = jain_index([row.ratio or 0.0 for row in groups])
    user_jain = jain_index([row.ratio or 0.0 for row in users])
    if not names_visible:
        users = _others_summed(users)

    config = scheduler_config_get()
    aggregates_at = AggregatesState.objects.filter(pk=1).values_list("updated_at", flat=True)
    return FairnessReport(
        window=window,
        since=since,
        now=now,
        normalized_hours=total_service / 3600,
        groups=tuple(groups),
        users=tuple(users),
        group_jain=group_jain,
        user_jain=user_jain,
        order=tuple(fair_share_order_rows(viewer=viewer, now=now, config=config)),
        policy=config.policy,
        fairness=config.fairness,
        half_life_hours=django_settings.GPULAB_USAGE_HALF_LIFE_HOURS,
        aggregates_at=aggregates_at.first(),
        names_visible=names_visible,
    )


def fair_share_snapshot(
    *, now: datetime, settings: SchedulerSettings
) -> tuple[Snapshot, dict[tuple[str, str | None], list[int]]]:
    """The scheduler's own snapshot as of `now`, and per (user, group) [pending, running] jobs.

    `snapshot_build` itself, so the page's ranking is the loop's by construction (usage
    decayed with the configured half-life, live usage of running and checkpointing jobs,
    PREEMPTING jobs left out of the job counts). Its Gittins history query reads the
    `job_finished` index, so it stays cheap with 100,000 finished jobs.
    """
    snapshot, _ = snapshot_build(now=now, settings=settings)
    counts: dict[tuple[str, str | None], list[int]] = defaultdict(lambda: [0, 0])
    for job in snapshot.jobs:
        counts[(job.user, job.group)][0 if job.phase is JobPhase.PENDING else 1] += 1
    return snapshot, counts


def fair_share_order_rows(
    *, viewer: User, now: datetime, config: SchedulerConfig | None = None
) -> list[OrderRow]:
    """Users with pending or running jobs, in the order the scheduler's fair share serves them.

    Steps:
    1. The fair-share part of the scheduler's snapshot as of `now` (`fair_share_snapshot`).
    2. `normalized_usage(snapshot, snapshot.jobs)`, exactly as `tiresias_order` calls it.
    3. Sort by that key, lowest first (ties by name, for a stable page); equal keys share
       a rank, since the scheduler then falls back to the queue's own order.
    4. For a student, every other user's row keeps its rank only.
    """
    config = config or scheduler_config_get()
    snapshot, counts = fair_share_snapshot(now=now, settings=scheduler_settings_from(config))
    usage_norm = normalized_usage(snapshot, snapshot.jobs)
    users = snapshot.user_by_name
    groups = snapshot.group_by_name

    def group_weight(name: str | None) -> float:
        # Same defaults as normalized_usage: no group, or an unknown one, weighs 1.
        return groups[name].weight if name is not None and name in groups else 1.0

    # For display only (the rank comes from normalized_usage itself): the group's share of
    # the weight of the groups with active jobs, as normalized_usage computes it.
    total_group_weight = sum(max(group_weight(g), 0.0) for g in {g for _, g in usage_norm})
    ordered = sorted(usage_norm, key=lambda pair: (usage_norm[pair], pair[0], pair[1] or ""))
    rows: list[OrderRow] = []
    rank = 0
    previous: float | None = None
    for position, pair in enumerate(ordered, start=1):
        user, group = pair
        key = usage_norm[pair]
        if key != previous:
            rank, previous = position, key
        is_self = user == viewer.get_username()
        if not viewer.is_lab_admin and not is_self:
            rows.append(OrderRow(rank, None, None, False, *([None] * 7)))
            continue
        account = users.get(user)
        weight = group_weight(group)
        rows.append(
            OrderRow(
                rank=rank,
                user=user,
                group=group,
                is_self=is_self,
                usage_hours=(account.usage if account else 0.0) / 3600,
                user_weight=account.weight if account else 1.0,
                group_weight=weight,
                group_share=weight / total_group_weight if total_group_weight > 0 else 0.0,
                # inf (a weight of 0) cannot be written as JSON; None reads as "last".
                normalized_usage=key if math.isfinite(key) else None,
                pending_jobs=counts[pair][0],
                running_jobs=counts[pair][1],
            )
        )
    return rows
