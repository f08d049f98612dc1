"""The utilization page: allocated vs used, GPU-hours per user and group, the per-GPU
heatmap and the idle-but-allocated table, built from the dashboard aggregates."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import GpuMinute, GpuSample, JobGpuMinute, JobGpuSample
from cluster.models import Device, DeviceType
from dashboard.models import UtilizationSample
from dashboard.selectors.utilization import WINDOWS, allocation_series, device_heatmap
from dashboard.services import aggregates_update, floor_hour
from jobs.choices import JobState
from tests.dashboard.helpers import device, hold, logged_in
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory

PAGE = "/utilization/"


def figure(response, name: str) -> dict:
    return json.loads(response.context[name])


def traces(response, name: str) -> dict[str, dict]:
    return {trace.get("name", trace["type"]): trace for trace in figure(response, name)["data"]}


# --------------------------------------------------------------------------- the page


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["owner", "lab_admin"])
def test_the_page_renders_its_charts_for_students_and_admins(request, small_cluster, persona):
    user = request.getfixturevalue(persona)
    response = logged_in(user).get(PAGE)

    assert response.status_code == 200
    page = response.content.decode()
    assert '<script src="/static/vendor/plotly.min.js" defer>' in page
    for chart in ("chart-allocated-used", "chart-usage-user", "chart-usage-group", "chart-heatmap"):
        assert f'id="{chart}"' in page
    assert 'data-refresh-seconds="60"' in page
    assert response.context["window"].key == "24h"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("asked", "shown"), [("7d", "7d"), ("30d", "30d"), ("1y", "24h"), ("", "24h")]
)
def test_the_window_is_chosen_in_the_query_and_a_bad_one_falls_back(owner, asked, shown):
    response = logged_in(owner).get(PAGE, {"window": asked})
    assert response.status_code == 200
    assert response.context["window"].key == shown
    assert f'href="?window={shown}" aria-current="page"' in response.content.decode()


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get(PAGE)
    assert response.status_code == 302 and response.url.startswith("/login/")


# --------------------------------------------------------------------------- allocated vs used


@pytest.mark.django_db
def test_allocated_and_used_come_from_the_utilization_samples(owner, small_cluster):
    now = timezone.now()
    a0, a1 = device(small_cluster, "a0", 0), device(small_cluster, "a0", 1)
    hold(owner, [a0, a1])
    for gpu, pct in ((a0, 50), (a1, 100)):
        GpuSample.objects.create(
            device=gpu,
            at=now - timedelta(seconds=30),
            utilization_pct=pct,
            memory_used_mb=1,
            memory_total_mb=2,
        )
    aggregates_update(now=now)

    response = logged_in(owner).get(PAGE)

    lines = traces(response, "allocated_used_json")
    assert lines["a100 allocated"]["y"] == [2.0]
    assert lines["a100 used"]["y"] == [1.5]
    assert lines["v100 allocated"]["y"] == [0.0]
    summary = {one.device_type: one for one in response.context["series"]}
    assert (summary["a100"].devices, summary["a100"].used_of_allocated_pct) == (8, 75.0)
    assert "75 %" in response.content.decode()


@pytest.mark.django_db
def test_long_windows_are_averaged_into_at_most_600_points_a_series(small_cluster):
    a100 = DeviceType.objects.get(name="a100")
    now = timezone.now()
    # A sample a minute for 3 hours from a half-hour boundary, alternating 2 and 4 GPUs:
    # the 7-day window's 30-minute buckets each average to 3.
    start = datetime.fromtimestamp((now.timestamp() - 4 * 3600) // 1800 * 1800, tz=UTC)
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            at=start + timedelta(minutes=i),
            device_type=a100,
            devices=8,
            schedulable=8,
            allocated=2 if i % 2 else 4,
            used=1.0,
        )
        for i in range(180)
    )
    (series,) = allocation_series(window=WINDOWS["7d"], now=now)
    assert [point.allocated for point in series.points] == [3.0] * 6
    assert [point.at for point in series.points] == [
        start + timedelta(minutes=30 * i) for i in range(6)
    ]

    # 30 days of a sample every 10 minutes (4,320) become 2-hour means.
    UtilizationSample.objects.all().delete()
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            at=now - timedelta(minutes=10 * i),
            device_type=a100,
            devices=8,
            schedulable=8,
            allocated=5,
            used=2.5,
        )
        for i in range(30 * 144)
    )
    (series,) = allocation_series(window=WINDOWS["30d"], now=now)
    assert 300 <= len(series.points) <= 600
    assert {point.allocated for point in series.points} == {5.0}
    assert {point.used for point in series.points} == {2.5}


# --------------------------------------------------------------------------- GPU-hours


@pytest.fixture
def finished_usage(owner, teammate, outsider, vision, nlp, small_cluster) -> datetime:
    """An hour two hours ago: alice 2 GPUs, bob 1 (vision), carol 3 (nlp)."""
    hour = floor_hour(timezone.now()) - timedelta(hours=2)
    devices = iter(small_cluster)
    for user, group, count in ((owner, vision, 2), (teammate, vision, 1), (outsider, nlp, 3)):
        hold(
            user,
            [next(devices) for _ in range(count)],
            group=group,
            start=hour,
            end=hour + timedelta(hours=1),
            state=JobState.SUCCEEDED,
        )
    aggregates_update(now=timezone.now())
    return hour


@pytest.mark.django_db
def test_an_admin_sees_gpu_hours_of_every_user_and_group_per_hour(lab_admin, finished_usage):
    response = logged_in(lab_admin).get(PAGE)

    users = traces(response, "usage_user_json")
    assert set(users) == {"alice", "bob", "carol"}
    periods = response.context["usage"].periods
    assert len(periods) == 24 and periods[-1] > finished_usage  # hourly bars, current hour last
    slot = periods.index(finished_usage)
    assert [users[name]["y"][slot] for name in ("alice", "bob", "carol")] == [2.0, 1.0, 3.0]
    assert sum(users["carol"]["y"]) == 3.0
    groups = traces(response, "usage_group_json")
    assert groups["vision"]["y"][slot] == 3.0 and groups["nlp"]["y"][slot] == 3.0
    assert figure(response, "usage_user_json")["layout"]["barmode"] == "stack"


@pytest.mark.django_db
def test_a_student_sees_their_own_gpu_hours_and_the_others_only_summed(owner, finished_usage):
    response = logged_in(owner).get(PAGE)

    users = traces(response, "usage_user_json")
    assert set(users) == {"alice", "Other users"}
    assert sum(users["alice"]["y"]) == 2.0 and sum(users["Other users"]["y"]) == 4.0
    groups = traces(response, "usage_group_json")
    assert sum(groups["vision"]["y"]) == 3.0 and sum(groups["nlp"]["y"]) == 3.0
    page = response.content.decode()
    assert "bob" not in page and "carol" not in page


@pytest.mark.django_db
def test_longer_windows_stack_gpu_hours_per_day(lab_admin, finished_usage):
    response = logged_in(lab_admin).get(PAGE, {"window": "7d"})

    usage = response.context["usage"]
    assert usage.period == "day" and len(usage.periods) == 7
    users = traces(response, "usage_user_json")
    assert len(users["carol"]["x"]) == 7 and sum(users["carol"]["y"]) == 3.0
    assert usage.total == 6.0


# --------------------------------------------------------------------------- heatmap


@pytest.mark.django_db
def test_the_heatmap_shows_each_gpus_mean_use_per_15_minutes(owner, small_cluster):
    now = timezone.now()
    minute = (now - timedelta(minutes=1)).replace(second=0, microsecond=0)
    for gpu, pct in (
        (device(small_cluster, "a0", 0), 40.0),
        (device(small_cluster, "v0", 1), 90.0),
    ):
        GpuMinute.objects.create(
            device=gpu, minute=minute, samples=2, utilization_avg=pct, memory_used_max_mb=0
        )
    aggregates_update(now=now)

    response = logged_in(owner).get(PAGE)

    (heat,) = figure(response, "heatmap_json")["data"]
    assert heat["type"] == "heatmap" and len(heat["x"]) == 96
    rows = dict(zip(heat["y"], heat["z"], strict=True))
    assert len(rows) == 10
    assert [value for value in rows["a0/0"] if value is not None] == [40.0]
    assert [value for value in rows["v0/1"] if value is not None] == [90.0]
    assert rows["a1/2"] == [None] * 96
    page = response.content.decode()
    assert "Busiest: <b>v0/1</b> (90 % on average)" in page
    assert "least used: <b>a0/0</b> (40 %)" in page


NOON = datetime(2026, 3, 10, 12, 5, tzinfo=UTC)


def minutes_at(gpu, start: datetime, count: int, pct: float) -> None:
    GpuMinute.objects.bulk_create(
        GpuMinute(
            device=gpu,
            minute=start + timedelta(minutes=m),
            samples=6,
            utilization_avg=pct,
            memory_used_max_mb=0,
        )
        for m in range(count)
    )


@pytest.mark.django_db
def test_runs_skipped_for_an_hour_leave_no_hole_in_the_heatmap(small_cluster):
    gpu = device(small_cluster, "a0", 0)
    eleven = NOON.replace(hour=11, minute=0)
    minutes_at(gpu, eleven, 60, 50.0)
    aggregates_update(now=eleven + timedelta(minutes=1))
    aggregates_update(now=NOON)  # the worker was down from 11:01 to 12:05

    heat = device_heatmap(now=NOON)

    (row,) = [row for row in heat.rows if row.label == "a0/0"]
    cells = {at.strftime("%H:%M"): value for at, value in zip(heat.starts, row.values, strict=True)}
    assert [cells[t] for t in ("11:00", "11:15", "11:30", "11:45")] == [50.0] * 4


@pytest.mark.django_db
def test_a_gpu_retired_within_the_day_keeps_its_heatmap_row(small_cluster):
    gpu = device(small_cluster, "a0", 3)
    minutes_at(gpu, NOON.replace(hour=10, minute=30), 15, 80.0)
    aggregates_update(now=NOON.replace(hour=10, minute=46))
    Device.all_objects.filter(pk=gpu.pk).update(retired_at=NOON.replace(hour=11, minute=30))
    old = device(small_cluster, "a1", 0)
    Device.all_objects.filter(pk=old.pk).update(retired_at=NOON - timedelta(days=2))

    labels = {row.label: row.mean for row in device_heatmap(now=NOON).rows}

    # Its history stays for the day it was retired in, on a row marked retired.
    assert labels["a0/3 (retired 11:30)"] == 80.0
    assert "a1/0" not in labels  # retired before the window: gone


@pytest.mark.django_db
def test_a_retired_gpus_last_reading_is_not_counted_as_use(small_cluster):
    retired = device(small_cluster, "a0", 3)
    Device.all_objects.filter(pk=retired.pk).update(retired_at=NOON - timedelta(minutes=5))
    for gpu in (device(small_cluster, "a0", 0), retired):
        GpuSample.objects.create(
            device=gpu,
            at=NOON - timedelta(seconds=30),
            utilization_pct=100,
            memory_used_mb=1,
            memory_total_mb=2,
        )

    aggregates_update(now=NOON)

    a100 = UtilizationSample.objects.get(device_type__name="a100")
    assert (a100.devices, a100.used) == (7, 1.0)


# --------------------------------------------------------------------------- idle but allocated


def job_minutes(job, gpu, pct, *, minutes=5):
    now = timezone.now().replace(second=0, microsecond=0)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(
            job=job,
            device=gpu,
            minute=now - timedelta(minutes=m + 1),
            samples=4,
            utilization_avg=pct,
            memory_used_max_mb=100,
        )
        for m in range(minutes)
    )


@pytest.mark.django_db
def test_running_jobs_using_their_gpus_below_10_percent_are_listed(
    lab_admin, owner, teammate, small_cluster
):
    idle = hold(owner, [device(small_cluster, "a0", 0)])
    job_minutes(idle, device(small_cluster, "a0", 0), 3.0)
    busy = hold(teammate, [device(small_cluster, "a0", 1)])
    job_minutes(busy, device(small_cluster, "a0", 1), 90.0)
    # Two GPUs held, a process on one of them at 15 %: 7.5 % over the GPUs it holds.
    half = hold(teammate, [device(small_cluster, "a1", 0), device(small_cluster, "a1", 1)])
    job_minutes(half, device(small_cluster, "a1", 0), 15.0)
    # Only raw samples so far (the minute roll-up has not run): they are used instead.
    fresh = hold(teammate, [device(small_cluster, "v0", 0)], start=timezone.now())
    JobGpuSample.objects.create(
        job=fresh,
        attempt=1,
        device=device(small_cluster, "v0", 0),
        at=timezone.now() - timedelta(seconds=20),
        utilization_pct=5,
        memory_used_mb=10,
    )
    silent = hold(teammate, [device(small_cluster, "v0", 1)])  # no reading: not judged
    # Old use does not count: only the last 15 minutes.
    stale = hold(owner, [device(small_cluster, "a1", 2)])
    JobGpuMinute.objects.create(
        job=stale,
        device=device(small_cluster, "a1", 2),
        minute=timezone.now() - timedelta(minutes=40),
        samples=4,
        utilization_avg=1.0,
        memory_used_max_mb=1,
    )

    response = logged_in(lab_admin).get(PAGE)

    listed = {job.job_id: job for job in response.context["idle"].jobs}
    assert set(listed) == {idle.pk, half.pk, fresh.pk}
    assert listed[idle.pk].utilization_avg == 3.0
    assert listed[half.pk].utilization_avg == 7.5 and listed[half.pk].gpus == 2
    assert listed[fresh.pk].utilization_avg == 5.0
    assert response.context["idle"].without_readings == 2  # silent and stale
    section = response.content.decode().split('data-refresh-id="idle-allocated"')[1]
    assert f'href="/jobs/{idle.pk}/"' in section and f'href="/jobs/{busy.pk}/"' not in section
    assert f'href="/jobs/{silent.pk}/"' not in section
    assert "alice" in section and "bob" in section and "a1/0, a1/1" in section


@pytest.mark.django_db
def test_a_student_sees_only_their_own_idle_jobs(owner, teammate, small_cluster):
    mine = hold(owner, [device(small_cluster, "a0", 0)])
    job_minutes(mine, device(small_cluster, "a0", 0), 2.0)
    theirs = hold(teammate, [device(small_cluster, "a0", 1)])
    job_minutes(theirs, device(small_cluster, "a0", 1), 1.0)

    response = logged_in(owner).get(PAGE)

    assert [job.job_id for job in response.context["idle"].jobs] == [mine.pk]
    page = response.content.decode()
    assert f"/jobs/{theirs.pk}/" not in page and "bob" not in page


@pytest.mark.django_db
def test_a_job_that_is_not_running_is_never_idle(lab_admin, owner, small_cluster):
    starting = hold(owner, [device(small_cluster, "a0", 0)], state=JobState.STARTING)
    job_minutes(starting, device(small_cluster, "a0", 0), 0.0)
    response = logged_in(lab_admin).get(PAGE)
    assert response.context["idle"].jobs == []
    assert "None: no job is running." in response.content.decode()


# --------------------------------------------------------------------------- cost


@pytest.mark.django_db
def test_the_page_costs_a_fixed_number_of_queries(
    lab_admin, owner, teammate, django_assert_max_num_queries
):
    a100 = DeviceTypeFactory(name="a100", speed=2.0)
    now = timezone.now()
    for n in range(3):
        node = NodeFactory(name=f"n{n}")
        gpus = [DeviceFactory(node=node, index=i, device_type=a100) for i in range(4)]
        for user, pair in ((owner, gpus[:2]), (teammate, gpus[2:])):
            job = hold(user, pair, start=now - timedelta(hours=3))
            for gpu in pair:
                job_minutes(job, gpu, 5.0 if user == owner else 80.0)
                GpuMinute.objects.create(
                    device=gpu,
                    minute=(now - timedelta(minutes=2)).replace(second=0, microsecond=0),
                    samples=3,
                    utilization_avg=50.0,
                    memory_used_max_mb=1,
                )
    aggregates_update(now=now)

    for user in (lab_admin, owner):
        client = logged_in(user)
        with django_assert_max_num_queries(12):
            response = client.get(PAGE, {"window": "7d"})
        assert response.status_code == 200
    assert len(response.context["idle"].jobs) == 3
