"""A user's entitled share on the fairness page follows the scheduler's fair-share rule.

`scheduler.policies.fairness.normalized_usage` ranks users by usage ÷ (user weight × group
share), so the shares it evens out are proportional to user weight × group weight; a user in
two groups is served through the better one, never through both at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import LabGroup
from accounts.services import user_create
from cluster.models import DeviceType
from dashboard.models import UsageHour
from dashboard.selectors.fairness import fairness_report
from scheduler.core.types import Account, Job, JobPhase, Snapshot
from scheduler.policies.fairness import normalized_usage

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
HOUR = 3600.0


def used(user, group, hours: float) -> None:
    UsageHour.objects.create(
        hour=NOW - timedelta(hours=3),
        user=user,
        group=group,
        device_type=DeviceType.objects.get(name="v100"),  # speed 1: service = GPU-seconds
        gpu_seconds=hours * HOUR,
        service=hours * HOUR,
    )


@pytest.fixture
def lab(owner, outsider, vision, nlp, small_cluster):
    """vision (weight 2): alice. nlp (weight 1): carol, and dave of weight 2."""
    dave = user_create(username="dave", password="pw-dave-123", groups=[nlp])
    dave.weight = 2.0
    dave.save(update_fields=["weight"])
    return {"alice": owner, "carol": outsider, "dave": dave}


@pytest.mark.django_db
def test_a_users_entitled_share_is_user_weight_times_group_weight_normalized(
    lab, vision, nlp, lab_admin
):
    used(lab["alice"], vision, 4)
    used(lab["carol"], nlp, 1)
    used(lab["dave"], nlp, 1)

    report = fairness_report(viewer=lab_admin, window="24h", now=NOW)

    users = {row.name: row for row in report.users}
    # alice 1 x 2, carol 1 x 1, dave 2 x 1: of 5.
    assert users["alice"].entitled == pytest.approx(2 / 5)
    assert users["carol"].entitled == pytest.approx(1 / 5)
    assert users["dave"].entitled == pytest.approx(2 / 5)
    assert users["alice"].ratio == pytest.approx((4 / 6) / (2 / 5))


@pytest.mark.django_db
def test_use_in_the_scheduler_proportions_scores_a_jain_index_of_one(lab, vision, nlp, lab_admin):
    hours = {"alice": 2.0, "carol": 1.0, "dave": 2.0}
    groups = {"alice": vision, "carol": nlp, "dave": nlp}
    for name, amount in hours.items():
        used(lab[name], groups[name], amount)

    report = fairness_report(viewer=lab_admin, window="24h", now=NOW)

    assert report.user_jain == pytest.approx(1.0)
    # The scheduler agrees: with this usage it ranks all three equal.
    jobs = tuple(
        Job(
            id=i, user=name, group=groups[name].name, num_gpus=1, submit_time=0.0,
            phase=JobPhase.PENDING,
        )
        for i, name in enumerate(hours)
    )  # fmt: skip
    snapshot = Snapshot(
        now=NOW.timestamp(),
        jobs=jobs,
        devices=(),
        users=tuple(
            Account(name=name, weight=lab[name].weight, usage=amount * HOUR)
            for name, amount in hours.items()
        ),
        groups=(Account(name="vision", weight=2.0), Account(name="nlp", weight=1.0)),
    )
    keys = set(normalized_usage(snapshot, jobs).values())
    assert max(keys) == pytest.approx(min(keys))


@pytest.mark.django_db
def test_a_user_in_two_groups_is_entitled_through_their_better_group(lab, vision, nlp, lab_admin):
    LabGroup.objects.filter(pk=vision.pk).update(weight=3.0)
    used(lab["alice"], vision, 1)
    used(lab["alice"], nlp, 1)
    used(lab["carol"], nlp, 1)

    report = fairness_report(viewer=lab_admin, window="24h", now=NOW)

    users = {row.name: row for row in report.users}
    # alice: max(1 x 3, 1 x 1) = 3 (never the sum, 4), carol: 1 x 1.
    assert users["alice"].entitled == pytest.approx(3 / 4)
    assert users["carol"].entitled == pytest.approx(1 / 4)


def scheduler_keys(usage_hours: dict[str, float], pairs: set[tuple[str, str]]) -> dict:
    """normalized_usage for one pending job per (user, group), vision 3 and nlp 1."""
    jobs = tuple(
        Job(id=i, user=user, group=group, num_gpus=1, submit_time=0.0, phase=JobPhase.PENDING)
        for i, (user, group) in enumerate(sorted(pairs))
    )
    snapshot = Snapshot(
        now=NOW.timestamp(),
        jobs=jobs,
        devices=(),
        users=tuple(Account(name=n, weight=1.0, usage=h * HOUR) for n, h in usage_hours.items()),
        groups=(Account(name="vision", weight=3.0), Account(name="nlp", weight=1.0)),
    )
    return normalized_usage(snapshot, jobs)


@pytest.mark.parametrize(
    ("alice_hours", "equal"),
    [(3.0, True), (4.0, False), (2.0, False)],
)
@pytest.mark.django_db
def test_jain_is_one_exactly_when_the_scheduler_ranks_a_two_group_user_equal(
    lab, vision, nlp, lab_admin, alice_hours, equal
):
    """alice works for vision (3) and nlp (1), carol for nlp: the scheduler serves alice
    through her vision pair, so it ranks them equal when alice used 3x carol's hours."""
    LabGroup.objects.filter(pk=vision.pk).update(weight=3.0)
    used(lab["alice"], vision, alice_hours / 2)
    used(lab["alice"], nlp, alice_hours / 2)
    used(lab["carol"], nlp, 1.0)

    report = fairness_report(viewer=lab_admin, window="24h", now=NOW)

    pairs = {("alice", "vision"), ("alice", "nlp"), ("carol", "nlp")}
    keys = scheduler_keys({"alice": alice_hours, "carol": 1.0}, pairs)
    # Each user is served through their lowest key (their better group).
    best = {user: min(k for (u, _), k in keys.items() if u == user) for user in ("alice", "carol")}
    assert (best["alice"] == pytest.approx(best["carol"])) is equal
    assert (report.user_jain == pytest.approx(1.0)) is equal
