"""The fairness page: shares vs entitled shares, Jain's index, the fair-share order, privacy."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import LabGroup, User
from cluster.models import DeviceType
from dashboard.models import UsageHour
from dashboard.selectors.fairness import (
    ANOTHER_USER,
    OTHER_USERS,
    fairness_report,
    jain_index,
)
from dashboard.services import aggregates_update, floor_hour
from jobs.models import Allocation
from jobs.services import JobSpec, job_mark_running, job_start, job_submit
from scheduler.core.types import JobPhase
from scheduler.policies.las import fifo_within_queue, tiresias_order, tiresias_queues
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.snapshot import snapshot_build
from tests.dashboard.helpers import logged_in

HOUR = 3600.0


def used(user: User, group: LabGroup | None, *, hours_ago: float, service: float) -> UsageHour:
    """A UsageHour row: `service` normalized GPU-seconds on a v100 (speed 1) `hours_ago`."""
    v100, _ = DeviceType.objects.get_or_create(name="v100", defaults={"speed": 1.0})
    hour = floor_hour(timezone.now() - timedelta(hours=hours_ago))
    return UsageHour.objects.create(
        hour=hour, user=user, group=group, device_type=v100, gpu_seconds=service, service=service
    )


def submit(user: User, gpus: int = 1):
    return job_submit(
        owner=user, spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["x"], num_gpus=gpus)
    )


def set_usage(account: User | LabGroup, seconds: float) -> None:
    """Fair-share usage as the job services store it: decayed as of `usage_updated_at`."""
    type(account).objects.filter(pk=account.pk).update(
        usage=seconds, usage_updated_at=timezone.now()
    )


# ----------------------------------------------------------------------------- Jain's index


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, 1.0, 1.0], 1.0),
        ([3.0, 0.0, 0.0], 1 / 3),  # one takes everything: 1/n
        ([1.5, 0.5], 0.8),
        ([2.0], 1.0),
        ([], None),
        ([0.0, 0.0], None),  # nothing used: undefined, not 1
    ],
)
def test_jains_index_is_sum_squared_over_n_times_sum_of_squares(values, expected):
    result = jain_index(values)
    assert result == expected if expected is None else result == pytest.approx(expected)


# ----------------------------------------------------------------------------- shares


@pytest.mark.django_db
def test_shares_entitlements_and_jain_come_from_usage_hours(owner, outsider, vision, nlp):
    used(owner, vision, hours_ago=2, service=30 * HOUR)
    used(outsider, nlp, hours_ago=30, service=10 * HOUR)

    report = fairness_report(viewer=owner, window="7d")

    groups = {row.name: row for row in report.groups}
    # vision weight 2, nlp weight 1: entitled 2/3 and 1/3; used 75 % and 25 %.
    assert groups["vision"].share == pytest.approx(0.75)
    assert groups["vision"].entitled == pytest.approx(2 / 3)
    assert groups["vision"].ratio == pytest.approx(1.125)
    assert groups["nlp"].share == pytest.approx(0.25)
    assert groups["nlp"].entitled == pytest.approx(1 / 3)
    assert groups["nlp"].normalized_hours == pytest.approx(10)
    assert report.group_jain == pytest.approx(1.875**2 / (2 * (1.125**2 + 0.75**2)))
    # Users (weight 1 each, one per group): entitled user weight x group weight, normalized,
    # so 2/3 and 1/3 like their groups, and the same Jain's index.
    assert report.user_jain == pytest.approx(report.group_jain)
    assert report.normalized_hours == pytest.approx(40)


@pytest.mark.django_db
def test_the_window_limits_which_hours_count(owner, outsider, vision, nlp):
    used(owner, vision, hours_ago=1, service=HOUR)
    used(outsider, nlp, hours_ago=72, service=3 * HOUR)

    day = fairness_report(viewer=owner, window="24h")
    week = fairness_report(viewer=owner, window="7d")

    assert [row.name for row in day.groups] == ["vision"]
    assert day.groups[0].share == 1.0 and day.group_jain == 1.0
    assert {row.name: row.share for row in week.groups} == {"vision": 0.25, "nlp": 0.75}


@pytest.mark.django_db
def test_an_idle_group_with_pending_jobs_is_entitled_to_a_share_it_did_not_get(
    owner, outsider, vision, nlp, small_cluster
):
    used(owner, vision, hours_ago=1, service=HOUR)
    submit(outsider)  # nlp has work waiting but used nothing

    report = fairness_report(viewer=owner, window="7d")

    groups = {row.name: row for row in report.groups}
    assert groups["nlp"].share == 0.0 and groups["nlp"].entitled == pytest.approx(1 / 3)
    # Ratios 1.5 and 0: the index drops to 1/n.
    assert report.group_jain == pytest.approx(0.5)


@pytest.mark.django_db
def test_usage_built_by_the_aggregation_task_from_real_allocations(
    owner, outsider, lab_admin, vision, nlp, small_cluster
):
    a100 = [d.pk for d in small_cluster if d.device_type.name == "a100"]
    v100 = [d.pk for d in small_cluster if d.device_type.name == "v100"]
    mine, theirs = submit(owner, 2), submit(outsider, 1)
    job_start(job_id=mine.pk, device_ids=a100[:2])
    job_start(job_id=theirs.pk, device_ids=v100[:1])
    now = timezone.now()
    Allocation.objects.update(started_at=now - timedelta(hours=2))

    aggregates_update(now=now)
    report = fairness_report(viewer=lab_admin, window="24h", now=now)

    groups = {row.name: row for row in report.groups}
    # 2 a100 (speed 2) × 2 h = 8 normalized hours vs 1 v100 × 2 h = 2.
    assert groups["vision"].gpu_hours == pytest.approx(4)
    assert groups["vision"].normalized_hours == pytest.approx(8)
    assert groups["nlp"].normalized_hours == pytest.approx(2)
    assert groups["vision"].share == pytest.approx(0.8)


# ----------------------------------------------------------------------------- privacy


@pytest.mark.django_db
def test_a_student_sees_every_group_but_only_themselves_among_users(
    owner, teammate, outsider, vision, nlp, small_cluster
):
    used(owner, vision, hours_ago=1, service=HOUR)
    used(teammate, vision, hours_ago=1, service=2 * HOUR)
    used(outsider, nlp, hours_ago=1, service=HOUR)
    submit(teammate)
    submit(outsider)

    page = logged_in(owner).get("/fairness/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "vision" in html and "nlp" in html
    assert "alice" in html
    assert "bob" not in html and "carol" not in html
    assert OTHER_USERS in html and ANOTHER_USER in html
    report = page.context["report"]
    assert [row.name for row in report.users] == ["alice", OTHER_USERS]
    assert report.users[1].share == pytest.approx(0.75)
    assert all(row.user is None and row.usage_hours is None for row in report.order)


@pytest.mark.django_db
def test_an_admin_sees_every_name(owner, outsider, lab_admin, vision, nlp, small_cluster):
    used(owner, vision, hours_ago=1, service=HOUR)
    submit(outsider)

    html = logged_in(lab_admin).get("/fairness/").content.decode()

    assert "alice" in html and "carol" in html and OTHER_USERS not in html


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get("/fairness/")
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "window"), [("", "7d"), ("?window=24h", "24h"), ("?window=1y", "7d")]
)
def test_the_window_comes_from_the_query_and_falls_back_to_7_days(owner, query, window):
    response = logged_in(owner).get(f"/fairness/{query}")
    assert response.status_code == 200
    assert response.context["report"].window == window
    assert response.context["refresh_seconds"] == 60


# ----------------------------------------------------------------------------- fair-share order


@pytest.mark.django_db
def test_the_order_ranks_by_decayed_usage_over_weight_times_group_share(
    owner, outsider, lab_admin, vision, nlp, small_cluster
):
    submit(owner)
    submit(outsider)
    set_usage(owner, 100 * HOUR)
    set_usage(outsider, 60 * HOUR)

    order = fairness_report(viewer=lab_admin, window="7d").order

    # Group shares 2/3 and 1/3: alice 100 / (1 × 2/3) = 150 h, carol 60 / (1 × 1/3) = 180 h.
    assert [(row.rank, row.user) for row in order] == [(1, "alice"), (2, "carol")]
    assert order[0].normalized_usage == pytest.approx(150 * HOUR)
    assert order[0].group_share == pytest.approx(2 / 3)


@pytest.mark.django_db
def test_usage_decays_with_the_configured_half_life(owner, lab_admin, settings, small_cluster):
    settings.GPULAB_USAGE_HALF_LIFE_HOURS = 24
    submit(owner)
    User.objects.filter(pk=owner.pk).update(
        usage=100 * HOUR, usage_updated_at=timezone.now() - timedelta(hours=48)
    )

    (row,) = fairness_report(viewer=lab_admin, window="7d").order

    assert row.usage_hours == pytest.approx(25, rel=1e-3)


@pytest.mark.django_db
def test_raising_a_groups_weight_in_the_quota_editor_changes_the_order(
    owner, outsider, lab_admin, vision, nlp, small_cluster
):
    submit(owner)
    submit(outsider)
    set_usage(owner, 100 * HOUR)
    set_usage(outsider, 60 * HOUR)
    client = logged_in(lab_admin)
    before = [row.user for row in client.get("/fairness/").context["report"].order]

    response = client.post(
        f"/manage/quotas/groups/{nlp.pk}/",
        {"weight": "4", "max_gpus": "", "max_running_jobs": "", "max_pending_jobs": ""},
    )
    page = client.get("/fairness/")

    assert response.status_code == 302
    assert before == ["alice", "carol"]
    # nlp 4 of 6: carol 60 / (4/6) = 90 h; vision 2 of 6: alice 100 / (2/6) = 300 h.
    assert [row.user for row in page.context["report"].order] == ["carol", "alice"]
    order_html = page.content.decode().split("Current fair-share order")[1]
    assert order_html.index("carol") < order_html.index("alice")


@pytest.mark.django_db
def test_a_student_sees_their_own_rank_and_only_ranks_of_others(
    owner, outsider, vision, nlp, small_cluster
):
    submit(owner)
    submit(outsider)
    set_usage(owner, 100 * HOUR)
    set_usage(outsider, 10 * HOUR)

    order = fairness_report(viewer=owner, window="7d").order

    assert [(row.rank, row.user, row.is_self) for row in order] == [
        (1, None, False),
        (2, "alice", True),
    ]
    assert order[0].group is None and order[0].pending_jobs is None


@pytest.mark.django_db
def test_the_page_order_is_the_order_the_scheduler_serves_jobs_in(
    owner, teammate, outsider, lab_admin, vision, nlp, small_cluster
):
    """Same snapshot, same function: LAS's own queue order lists the users in page order."""
    for user, hours in ((owner, 50), (teammate, 5), (outsider, 20)):
        submit(user)
        set_usage(user, hours * HOUR)
    now = timezone.now()

    order = fairness_report(viewer=lab_admin, window="7d", now=now).order
    snapshot, _ = snapshot_build(now=now, settings=scheduler_settings_from(scheduler_config_get()))
    served = tiresias_order(snapshot, tiresias_queues(snapshot), fifo_within_queue)

    assert scheduler_config_get().fairness == 1.0
    assert [row.user for row in order] == [job.user for job in served]
    assert [row.user for row in order] == ["bob", "carol", "alice"]


@pytest.mark.django_db
def test_running_jobs_add_their_live_usage_as_the_scheduler_counts_it(
    owner, outsider, lab_admin, small_cluster
):
    job = submit(owner)
    submit(outsider)
    job_start(job_id=job.pk, device_ids=[small_cluster[0].pk])  # an a100, speed 2
    job_mark_running(job_id=job.pk)
    Allocation.objects.update(started_at=timezone.now() - timedelta(hours=1))

    order = fairness_report(viewer=lab_admin, window="7d").order

    assert [row.user for row in order] == ["carol", "alice"]
    assert order[1].usage_hours == pytest.approx(2, rel=1e-2)
    assert (order[1].pending_jobs, order[1].running_jobs) == (0, 1)
    assert snapshot_phase_of(job.pk) is JobPhase.RUNNING


def snapshot_phase_of(job_id: int) -> JobPhase:
    snapshot, _ = snapshot_build(
        now=timezone.now(), settings=scheduler_settings_from(scheduler_config_get())
    )
    return snapshot.job_by_id[job_id].phase


# ----------------------------------------------------------------------------- cost


@pytest.mark.django_db
def test_the_page_costs_a_bounded_number_of_queries(
    lab_admin, small_cluster, django_assert_max_num_queries
):
    groups = [LabGroup.objects.create(name=f"g{n}", weight=n + 1) for n in range(5)]
    users = []
    for n in range(30):
        user = User.objects.create(username=f"u{n}", default_group=groups[n % 5])
        groups[n % 5].members.add(user)
        users.append(user)
        for hours_ago in (1, 5, 30):
            used(user, groups[n % 5], hours_ago=hours_ago, service=HOUR * (n + 1))
    for user in users[:10]:
        submit(user)
    client = logged_in(lab_admin)
    client.get("/fairness/")  # warm the session and settings row

    with django_assert_max_num_queries(20):
        response = client.get("/fairness/")

    assert response.status_code == 200
    assert len(response.context["report"].users) == 30
    assert len(response.context["report"].order) == 10


@pytest.mark.django_db
def test_the_page_ranks_with_the_schedulers_snapshot_and_counts_jobs_per_user_and_group(
    owner, teammate, outsider, vision, nlp, small_cluster, settings
):
    """Decayed and live usage reach the page's keys exactly as they reach the scheduler's."""
    from dashboard.selectors.fairness import fair_share_snapshot
    from scheduler.policies.fairness import normalized_usage

    settings.GPULAB_USAGE_HALF_LIFE_HOURS = 12
    running = submit(owner, 2)
    job_start(job_id=running.pk, device_ids=[small_cluster[0].pk, small_cluster[8].pk])
    job_mark_running(job_id=running.pk)
    submit(owner)
    submit(teammate)
    submit(outsider)
    Allocation.objects.update(started_at=timezone.now() - timedelta(minutes=90))
    User.objects.filter(pk=teammate.pk).update(
        usage=5 * HOUR, usage_updated_at=timezone.now() - timedelta(hours=30)
    )
    LabGroup.objects.filter(pk=nlp.pk).update(weight=0.5)
    now = timezone.now()
    config = scheduler_settings_from(scheduler_config_get())

    theirs, _ = snapshot_build(now=now, settings=config)
    ours, counts = fair_share_snapshot(now=now, settings=config)

    usage = {a.name: a.usage for a in ours.users}
    # bob: 5 h stored 30 h ago, half-life 12 h; alice: 90 min live on an a100 (2.0) + a v100,
    # each GPU-second decayed from when it was used: 3.0 × H/ln 2 × (1 − 2^(−1.5 h/H)).
    assert usage["bob"] == pytest.approx(5 * HOUR * 0.5 ** (30 / 12), rel=1e-3)
    live = 3.0 * 12 * HOUR / math.log(2) * (1 - 0.5 ** (1.5 / 12))
    assert live == pytest.approx(15_518, rel=1e-3)  # not the undecayed 16,200
    assert usage["alice"] == pytest.approx(live, rel=1e-3)
    assert usage["carol"] == 0.0
    assert normalized_usage(ours, ours.jobs) == normalized_usage(theirs, theirs.jobs)
    assert counts == {
        ("alice", "vision"): [1, 1],
        ("bob", "vision"): [1, 0],
        ("carol", "nlp"): [1, 0],
    }
