"""The time charts (per-GPU heatmap, allocated vs used, queue length) give every moment its
own x, also in the hour a fall-back daylight saving change repeats: plotly.js drops a date
string's UTC offset, so 01:00 EDT and 01:00 EST written as wall-clock text share one x.
Across a change x runs at one fixed offset and the ticks and hover text carry the real wall
clock; on an ordinary day the figures are what they always were."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from dashboard.charts import chart_time, figure_json, time_axis
from dashboard.models import DeviceUtilizationBucket, QueueSample, UtilizationSample
from dashboard.selectors.utilization import WINDOWS, allocation_series, device_heatmap
from dashboard.views.queue import _queue_length_chart
from dashboard.views.utilization import allocated_used_figure, heatmap_figure

# New York leaves summer time on 2026-11-01: 01:00 EDT is 05:00 UTC, 01:00 EST is 06:00 UTC.
FIRST_ONE_AM = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
FALL_BACK_NOON = datetime(2026, 11, 1, 17, 0, tzinfo=UTC)  # 12:00 EST
ORDINARY_NOON = datetime(2026, 11, 10, 17, 0, tzinfo=UTC)


@pytest.fixture
def new_york(settings):
    settings.TIME_ZONE = "America/New_York"


def is_increasing(values: list[str]) -> bool:
    return all(a < b for a, b in pairwise(values))


def samples_every_5_minutes(device_type, *, now: datetime) -> None:
    """13 h of utilization and queue samples up to `now`: 8 GPUs held and 5 jobs pending in
    the first 01:00 hour (EDT) of the fall-back day, 2 and 1 at every other time."""
    for minute in range(0, 13 * 60, 5):
        at = now - timedelta(minutes=minute)
        first_one_am = FIRST_ONE_AM <= at < FIRST_ONE_AM + timedelta(hours=1)
        UtilizationSample.objects.create(
            at=at,
            device_type=device_type,
            devices=8,
            schedulable=8,
            allocated=8 if first_one_am else 2,
            used=0.0,
            used_allocated=0.0,
        )
        QueueSample.objects.create(
            at=at, level=0, pending_jobs=5 if first_one_am else 1, pending_gpus=1
        )


# --------------------------------------------------------------------------- heatmap


@pytest.mark.django_db
def test_the_heatmap_gives_the_repeated_hour_its_own_columns(new_york, small_cluster):
    gpu = small_cluster[0]
    # 90 % through 01:00-01:59 EDT, 10 % through 01:00-01:59 EST.
    for quarter in range(8):
        DeviceUtilizationBucket.objects.create(
            device=gpu,
            start=FIRST_ONE_AM + timedelta(minutes=15 * quarter),
            samples=60,
            utilization_avg=90.0 if quarter < 4 else 10.0,
        )
    heatmap = device_heatmap(now=FALL_BACK_NOON)

    (trace,) = json.loads(figure_json(heatmap_figure(heatmap)))["data"]

    x, z = trace["x"], trace["z"][0]
    assert len(set(x)) == len(x) == 96 and is_increasing(x)
    hover = dict(zip(trace["text"][0], z, strict=True))
    assert hover["2026-11-01 01:00 EDT"] == 90.0 and hover["2026-11-01 01:45 EDT"] == 90.0
    assert hover["2026-11-01 01:00 EST"] == 10.0 and hover["2026-11-01 01:45 EST"] == 10.0
    assert "2026-11-01 02:00" in hover and "%{text}" in trace["hovertemplate"]


@pytest.mark.django_db
def test_the_heatmap_of_the_fall_back_day_is_labelled_with_the_real_wall_clock(
    new_york, small_cluster
):
    figure = json.loads(figure_json(heatmap_figure(device_heatmap(now=FALL_BACK_NOON))))

    axis = figure["layout"]["xaxis"]
    ticks = dict(zip(axis["ticktext"], axis["tickvals"], strict=True))
    # Every 6 local hours, dated at midnight. x runs at EST (the chart's last offset), so
    # midnight EDT (04:00 UTC) sits at 23:00 and 06:00 EST (11:00 UTC) at 06:00.
    assert list(ticks) == ["18:00<br>Oct 31, 2026", "00:00<br>Nov 1, 2026", "06:00", "12:00"]
    assert ticks["00:00<br>Nov 1, 2026"] == "2026-10-31 23:00"
    assert ticks["06:00"] == "2026-11-01 06:00"
    assert ticks["12:00"] == "2026-11-01 12:00"


@pytest.mark.django_db
def test_an_ordinary_days_heatmap_is_drawn_on_the_wall_clock_as_before(new_york, small_cluster):
    heatmap = device_heatmap(now=ORDINARY_NOON)

    figure = json.loads(figure_json(heatmap_figure(heatmap)))

    (trace,) = figure["data"]
    assert trace["x"] == [chart_time(start) for start in heatmap.starts]
    assert "text" not in trace and "%{x}" in trace["hovertemplate"]
    assert "tickvals" not in figure["layout"]["xaxis"]


# --------------------------------------------------------------------------- allocated vs used


@pytest.mark.django_db
def test_allocated_vs_used_draws_the_repeated_hour_after_the_first(new_york, small_cluster):
    samples_every_5_minutes(small_cluster[0].device_type, now=FALL_BACK_NOON)
    series = allocation_series(window=WINDOWS["24h"], now=FALL_BACK_NOON)

    figure = json.loads(figure_json(allocated_used_figure(series)))

    allocated = figure["data"][0]
    x = allocated["x"]
    assert len(set(x)) == len(x) == 156 and is_increasing(x)
    hover = dict(zip(allocated["text"], allocated["y"], strict=True))
    assert hover["2026-11-01 01:00 EDT"] == 8.0 and hover["2026-11-01 01:55 EDT"] == 8.0
    assert hover["2026-11-01 01:00 EST"] == 2.0
    assert allocated["x"][allocated["text"].index("2026-11-01 01:00 EST")] == "2026-11-01 01:00"
    assert "%{text}" in allocated["hovertemplate"]
    assert figure["layout"]["xaxis"]["tickmode"] == "array"


@pytest.mark.django_db
def test_an_ordinary_days_allocated_vs_used_is_drawn_as_before(new_york, small_cluster):
    samples_every_5_minutes(small_cluster[0].device_type, now=ORDINARY_NOON)
    series = allocation_series(window=WINDOWS["24h"], now=ORDINARY_NOON)

    figure = json.loads(figure_json(allocated_used_figure(series)))

    allocated = figure["data"][0]
    assert allocated["x"] == [chart_time(point.at) for point in series[0].points]
    assert "text" not in allocated and allocated["hovertemplate"].startswith("%{x}<br>")
    assert "tickvals" not in figure["layout"]["xaxis"]


# --------------------------------------------------------------------------- queue length


@pytest.mark.django_db
def test_the_queue_length_draws_the_repeated_hour_after_the_first(new_york, small_cluster):
    samples_every_5_minutes(small_cluster[0].device_type, now=FALL_BACK_NOON)

    figure = json.loads(_queue_length_chart(FALL_BACK_NOON).figure)

    (level,) = figure["data"]
    assert len(set(level["x"])) == len(level["x"]) == 156 and is_increasing(level["x"])
    hover = dict(zip(level["text"], level["y"], strict=True))
    assert hover["2026-11-01 01:30 EDT"] == 5 and hover["2026-11-01 01:30 EST"] == 1
    assert "%{text}" in level["hovertemplate"]


@pytest.mark.django_db
def test_an_ordinary_days_queue_length_is_drawn_as_before(new_york, small_cluster):
    samples_every_5_minutes(small_cluster[0].device_type, now=ORDINARY_NOON)

    figure = json.loads(_queue_length_chart(ORDINARY_NOON).figure)

    (level,) = figure["data"]
    assert level["x"][-1] == "2026-11-10 12:00" and is_increasing(level["x"])
    assert "text" not in level and "hovertemplate" not in level
    assert "tickvals" not in figure["layout"]["xaxis"]


# --------------------------------------------------------------------------- longer windows


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("days", "ticks"),
    [
        (7, ["Oct 27<br>2026", "Oct 28", "Oct 29", "Oct 30", "Oct 31", "Nov 1", "Nov 2"]),
        (30, ["Oct 4<br>2026", "Oct 11", "Oct 18", "Oct 25", "Nov 1"]),  # Sundays
    ],
)
def test_a_longer_window_across_the_change_is_dated_at_local_midnights(new_york, days, ticks):
    now = datetime(2026, 11, 2, 17, 0, tzinfo=UTC)
    moments = [now - timedelta(hours=hour) for hour in range(24 * days)]

    axis = time_axis(moments)

    assert axis.axis["ticktext"] == ticks
    # Midnight EDT before the change sits an hour early on the EST-based x, midnight EST on it.
    tick = dict(zip(axis.axis["ticktext"], axis.axis["tickvals"], strict=True))
    assert tick["Nov 1"] == "2026-10-31 23:00"
    if "Nov 2" in tick:
        assert tick["Nov 2"] == "2026-11-02 00:00"


@pytest.mark.django_db
def test_a_spring_forward_day_runs_evenly_with_its_real_hours_as_ticks(new_york):
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT. Every 5 minutes for 24 h up to 13:00 EDT.
    now = datetime(2026, 3, 8, 17, 0, tzinfo=UTC)
    moments = [now - timedelta(minutes=5 * step) for step in range(24 * 12)]

    axis = time_axis(moments)

    x = axis.x(moments[::-1])
    assert len(set(x)) == len(x) and is_increasing(x)
    assert axis.axis["ticktext"] == [
        "18:00<br>Mar 7, 2026",
        "00:00<br>Mar 8, 2026",
        "06:00",
        "12:00",
    ]
    # No hour is missing from x: 01:55 EST and 03:00 EDT are five minutes apart.
    assert "2026-03-08 02:55" in x and "2026-03-08 03:00" in x
