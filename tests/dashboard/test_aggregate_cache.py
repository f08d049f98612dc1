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


@pytest.mark.django_db
def test_a_students_breakdown_cut_from_the_admins_equals_the_one_read_for_her(
    owner, teammate, outsider, lab_admin, vision, nlp, small_cluster
):
    from dashboard.selectors.utilization import (
        WINDOWS,
        usage_breakdown,
        usage_breakdown_redacted,
    )

    recent = timezone.now() - timedelta(hours=3)
    for number, (user, group) in enumerate(((owner, vision), (teammate, vision), (outsider, nlp))):
        job = JobFactory(owner=user, group=group, state=JobState.SUCCEEDED)
        Allocation.objects.create(
            job=job, attempt=1, device=small_cluster[number], started_at=recent,
            ended_at=recent + timedelta(minutes=20 * (number + 1)),
        )  # fmt: skip
    aggregates_update()
    for key in ("24h", "30d"):
        window = WINDOWS[key]
        direct = usage_breakdown(viewer=owner, window=window)
        cut = usage_breakdown_redacted(
            usage_breakdown(viewer=lab_admin, window=window), viewer=owner
        )
        assert [s.label for s in cut.by_user] == [s.label for s in direct.by_user]
        assert [s.label for s in cut.by_user] == ["alice", "Other users"]
        for a, b in zip(cut.by_user, direct.by_user, strict=True):
            assert a.gpu_hours == pytest.approx(b.gpu_hours, abs=0.002)
        assert cut.by_group == direct.by_group
