"""The job page's GPU-use chart gives every reading its own x, also in the hour the autumn
daylight saving change repeats (as the dashboard's time charts do, tests/dashboard/
test_time_charts_dst.py): plotly.js drops a date string's UTC offset, so 01:30 EDT and
01:30 EST written as wall-clock text share one x and the line doubles back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from django.test import Client

from agents.models import JobGpuMinute
from tests.factories import JobFactory

# New York leaves summer time on 2026-11-01 at 06:00 UTC (02:00 EDT becomes 01:00 EST).
START = datetime(2026, 11, 1, 4, 30, tzinfo=UTC)  # 00:30 EDT


@pytest.fixture
def new_york(settings):
    settings.TIME_ZONE = "America/New_York"


def is_increasing(values: list[str]) -> bool:
    return all(a < b for a, b in pairwise(values))


@pytest.mark.django_db
def test_the_gpu_use_chart_runs_forward_through_the_fall_back_hour(new_york, owner, small_cluster):
    job = JobFactory(owner=owner)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(job=job, device=small_cluster[0], minute=START + timedelta(minutes=n),
                     samples=4, utilization_avg=float(n % 100), memory_used_max_mb=1024)
        for n in range(180)
    )  # fmt: skip
    client = Client()
    client.force_login(owner)

    figure = json.loads(client.get(f"/jobs/{job.pk}/").context["gpu_figure"])

    utilization, memory = figure["data"]
    assert utilization["x"] == memory["x"] and len(utilization["x"]) == 180
    assert is_increasing(utilization["x"])
    # The hover names the true wall clock, the repeated hour told apart by its zone.
    assert "%{text}" in utilization["hovertemplate"] and "%{text}" in memory["hovertemplate"]
    assert {"2026-11-01 01:30 EDT", "2026-11-01 01:30 EST"} <= set(utilization["text"])
    # Both panels' axes carry the ticks that name the wall clock.
    for name in ("xaxis", "xaxis2"):
        axis = figure["layout"][name]
        assert axis["tickmode"] == "array" and axis["tickvals"] and axis["ticktext"]
        assert any("EDT" in text for text in axis["ticktext"])


@pytest.mark.django_db
def test_on_an_ordinary_day_x_is_the_local_wall_clock_to_the_second(new_york, owner, small_cluster):
    job = JobFactory(owner=owner)
    noon = datetime(2026, 11, 10, 17, 0, tzinfo=UTC)  # 12:00 EST
    for n in range(3):
        JobGpuMinute.objects.create(job=job, device=small_cluster[0],
                                    minute=noon + timedelta(minutes=n), samples=1,
                                    utilization_avg=50.0, memory_used_max_mb=0)  # fmt: skip
    client = Client()
    client.force_login(owner)

    figure = json.loads(client.get(f"/jobs/{job.pk}/").context["gpu_figure"])

    assert figure["data"][0]["x"] == [
        "2026-11-10 12:00:00",
        "2026-11-10 12:01:00",
        "2026-11-10 12:02:00",
    ]
    assert "text" not in figure["data"][0]
