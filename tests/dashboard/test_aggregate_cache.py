"""Figures built only from aggregates are cached per aggregation run: exact, never stale."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.selectors.aggregates import cached_on_aggregates
from dashboard.services import aggregates_update
from jobs.choices import JobState
from jobs.models import Allocation
from tests.factories import JobFactory


def group_gpu_hours(client: Client) -> float:
    figure = json.loads(client.get("/utilization/").context["usage_group_json"])
    return round(sum(sum(value or 0 for value in trace["y"]) for trace in figure["data"]), 2)


@pytest.mark.django_db
def test_the_utilization_figures_change_exactly_when_the_aggregates_do(
    lab_admin, owner, vision, small_cluster
):
    start = timezone.now() - timedelta(hours=2)
    first = JobFactory(owner=owner, group=vision, state=JobState.SUCCEEDED)
    Allocation.objects.create(
        job=first, attempt=1, device=small_cluster[0], started_at=start,
        ended_at=start + timedelta(hours=1),
    )  # fmt: skip
    aggregates_update()
    client = Client()
    client.force_login(lab_admin)
    assert group_gpu_hours(client) == 1.0

    # Allocations are written as they start (never backdated): this one is recent.
    recent = timezone.now() - timedelta(minutes=7)
    second = JobFactory(owner=owner, group=vision, state=JobState.SUCCEEDED)
    Allocation.objects.create(
        job=second, attempt=1, device=small_cluster[1], started_at=recent,
        ended_at=recent + timedelta(minutes=6),
    )  # fmt: skip
    assert group_gpu_hours(client) == 1.0  # the aggregates have not run: nothing changed
    aggregates_update()
    assert group_gpu_hours(client) == 1.1  # a new run, a new cache key


@pytest.mark.django_db
def test_before_the_first_run_nothing_is_cached():
    calls = []
    for _ in range(2):
        cached_on_aggregates("probe", lambda as_of: calls.append(as_of) or len(calls))
    assert calls == [None, None]


@pytest.mark.django_db
def test_within_a_run_the_build_happens_once_with_the_run_time():
    result = aggregates_update()
    calls = []
    for _ in range(3):
        cached_on_aggregates("probe-once", lambda as_of: calls.append(as_of) or "built")
    assert len(calls) == 1 and calls[0] is not None
    assert result.duration_ms >= 0


@pytest.mark.django_db
def test_the_periodic_task_builds_the_shared_figures_so_readers_find_them_cached(
    lab_admin, monkeypatch
):
    from dashboard.tasks import aggregates_update_task
    from dashboard.views import queue, utilization

    aggregates_update_task.apply().get()

    def must_not_build(*args, **kwargs):
        raise AssertionError("built on a page load, not by the task")

    monkeypatch.setattr(utilization, "_cluster_part", must_not_build)
    monkeypatch.setattr(utilization, "_usage_part", must_not_build)
    monkeypatch.setattr(queue, "_queue_length_figure", must_not_build)
    client = Client()
    client.force_login(lab_admin)
    for window in ("24h", "7d", "30d"):
        assert client.get(f"/utilization/?window={window}").status_code == 200
    assert client.get("/queue/").status_code == 200
