"""The 24 h GPU-hours chart gives every local hour its own bar, also the hour that a fall-back
daylight saving change repeats (plotly.js drops a date string's UTC offset, so two wall-clock
01:00 on a date axis would draw at one x)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dashboard.charts import figure_json
from dashboard.selectors.utilization import WINDOWS, usage_breakdown
from dashboard.services import aggregates_update
from dashboard.views.utilization import usage_figure
from jobs.choices import JobState
from tests.dashboard.helpers import hold

# New York leaves summer time on 2026-11-01: 01:00 EDT is 05:00 UTC, 01:00 EST is 06:00 UTC.
FIRST_ONE_AM = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)


def usage_chart(lab_admin, now: datetime) -> dict:
    usage = usage_breakdown(viewer=lab_admin, window=WINDOWS["24h"], now=now)
    return json.loads(figure_json(usage_figure(usage, usage.by_user)))


@pytest.mark.django_db
def test_the_repeated_fall_back_hour_gets_its_own_bar(settings, lab_admin, owner, small_cluster):
    settings.TIME_ZONE = "America/New_York"
    hold(owner, small_cluster[:1], start=FIRST_ONE_AM, end=FIRST_ONE_AM + timedelta(hours=1),
         state=JobState.SUCCEEDED)  # fmt: skip
    second = FIRST_ONE_AM + timedelta(hours=1)
    hold(owner, small_cluster[1:3], start=second, end=second + timedelta(hours=1),
         state=JobState.SUCCEEDED)  # fmt: skip
    now = datetime(2026, 11, 1, 13, 10, tzinfo=UTC)  # 08:10 EST
    aggregates_update(now=now)

    chart = usage_chart(lab_admin, now)

    (alice,) = chart["data"]
    x = alice["x"]
    assert len(x) == 24 and len(set(x)) == 24
    hours = dict(zip(x, alice["y"], strict=True))
    assert hours["2026-11-01 01:00 EDT"] == 1.0
    assert hours["2026-11-01 01:00 EST"] == 2.0
    assert x.index("2026-11-01 01:00 EST") == x.index("2026-11-01 01:00 EDT") + 1
    assert "2026-11-01 00:00" in x and "2026-11-01 02:00" in x  # suffixed only where needed
    axis = chart["layout"]["xaxis"]
    assert axis["type"] == "category"
    assert set(axis["tickvals"]) <= set(x)
    assert axis["ticktext"][axis["tickvals"].index("2026-11-01 00:00")] == "00:00<br>Nov 1"


@pytest.mark.django_db
def test_an_ordinary_day_has_one_plain_label_per_hour(settings, lab_admin, owner, small_cluster):
    settings.TIME_ZONE = "America/New_York"
    start = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
    hold(owner, small_cluster[:1], start=start, end=start + timedelta(hours=1),
         state=JobState.SUCCEEDED)  # fmt: skip
    now = datetime(2026, 11, 10, 20, 10, tzinfo=UTC)  # 15:10 EST
    aggregates_update(now=now)

    x = usage_chart(lab_admin, now)["data"][0]["x"]

    assert x[0] == "2026-11-09 16:00" and x[-1] == "2026-11-10 15:00"
    assert all(len(label) == len("2026-11-10 15:00") for label in x)
