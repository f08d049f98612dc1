"""Labels on the utilization and queue pages: whose row is "(you)", a replaced GPU's heatmap
row, and what the queue's attained service measures."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from accounts.choices import Role
from accounts.services import user_create
from agents.models import GpuMinute
from cluster.models import Device
from dashboard.selectors.utilization import device_heatmap
from dashboard.services import aggregates_update
from dashboard.views.utilization import heatmap_figure, utilization_figures_warm
from jobs.choices import JobState
from tests.dashboard.helpers import hold, logged_in
from tests.factories import DeviceFactory, JobFactory

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def user_rows(html: str) -> list[tuple[str, bool]]:
    """(name, marked mine) of each row of the GPU-hours-per-user table."""
    rows = re.findall(r'<tr( class="mine")?><th scope="row">(.*?)</th>', html)
    return [(re.sub(r"<[^>]+>", "", name).strip(), bool(mine)) for mine, name in rows]


@pytest.mark.django_db
@pytest.mark.parametrize("warmed", [False, True])
def test_each_admin_sees_only_their_own_row_as_theirs(lab_admin, owner, small_cluster, warmed):
    other_admin = user_create(username="admin2", password="pw-admin2-123", role=Role.ADMIN)
    start = timezone.now() - timedelta(hours=2)
    hold(lab_admin, small_cluster[:1], start=start, end=start + timedelta(hours=1))
    hold(owner, small_cluster[1:2], start=start, end=start + timedelta(hours=1))
    aggregates_update()
    if warmed:
        utilization_figures_warm()  # what the beat task does after each run

    # The first admin to ask builds the admins' shared figures; the second reuses them.
    first = user_rows(logged_in(lab_admin).get("/utilization/").content.decode())
    second = user_rows(logged_in(other_admin).get("/utilization/").content.decode())

    assert ("root (you)", True) in first and ("alice", False) in first
    assert ("root", False) in second and ("alice", False) in second
    assert not any(mine for _, mine in second)


@pytest.mark.django_db
def test_a_replaced_gpu_keeps_a_heatmap_row_of_its_own(small_cluster):
    old = small_cluster[0]
    for minute in range(15):
        GpuMinute.objects.create(
            device=old, minute=T0 + timedelta(minutes=minute), samples=1,
            utilization_avg=10, memory_used_max_mb=1,
        )  # fmt: skip
    Device.all_objects.filter(pk=old.pk).update(retired_at=T0 + timedelta(minutes=20))
    new = DeviceFactory(node=old.node, index=old.index, device_type=old.device_type)
    for minute in range(30, 45):
        GpuMinute.objects.create(
            device=new, minute=T0 + timedelta(minutes=minute), samples=1,
            utilization_avg=90, memory_used_max_mb=1,
        )  # fmt: skip
    for minutes in (16, 50):  # each run buckets the minutes since the one before
        aggregates_update(now=T0 + timedelta(minutes=minutes))

    heatmap = device_heatmap(now=T0 + timedelta(minutes=50))

    means = {row.label: row.mean for row in heatmap.rows[:2]}
    assert means == {"a0/0 (retired 12:20)": 10.0, "a0/0": 90.0}
    labels = json.loads(heatmap_figure(heatmap).to_json())["data"][0]["y"]
    assert len(labels) == len(set(labels))  # one band per row of the chart


@pytest.mark.django_db
def test_the_queue_labels_attained_service_as_normalized(owner, vision):
    JobFactory(owner=owner, group=vision, state=JobState.RUNNING, attained_service=7200.0)
    JobFactory(owner=owner, group=vision, queue_position=1, attained_service=3600.0)

    page = logged_in(owner).get("/queue/").content.decode()

    assert "Attained GPU·h" not in page
    assert page.count("Attained service (normalized GPU·h)</th>") == 2
    assert "Not plain GPU-hours." in page
