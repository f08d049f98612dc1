"""A window ("last 24 h", "7 d", "30 d") covers the same span on every page and in the API:
whole local hours or days ending with the current one, from `window_start`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from cluster.models import DeviceType
from dashboard.models import UtilizationSample
from dashboard.selectors.fairness import fairness_report
from dashboard.selectors.utilization import WINDOWS, allocation_series, window_start
from tests.dashboard.helpers import logged_in


@pytest.mark.django_db
@pytest.mark.parametrize("key", list(WINDOWS))
def test_the_api_start_is_the_first_period(owner, api_as, key):
    body = api_as(owner).get(f"/api/v1/utilization/?window={key}").json()

    assert parse_datetime(body["start"]) == parse_datetime(body["usage"]["periods"][0])
    start = timezone.localtime(parse_datetime(body["start"]))
    if key == "24h":
        assert (start.minute, start.second) == (0, 0)
        assert parse_datetime(body["end"]) - parse_datetime(body["start"]) <= timedelta(hours=24)
    else:
        assert (start.hour, start.minute) == (0, 0)
        days = WINDOWS[key].span.days
        assert start.date() == timezone.localdate() - timedelta(days=days - 1)


@pytest.mark.django_db
@pytest.mark.parametrize("key", list(WINDOWS))
def test_the_fairness_page_starts_its_windows_where_the_utilization_page_does(settings, owner, key):
    settings.TIME_ZONE = "Asia/Kolkata"
    now = datetime(2026, 11, 20, 9, 10, tzinfo=UTC)  # 14:40 in Kolkata

    report = fairness_report(viewer=owner, window=key, now=now)

    assert report.since == window_start(window=WINDOWS[key], now=now)
    local = report.since.astimezone(ZoneInfo("Asia/Kolkata"))
    expected = {"24h": (19, 15, 0), "7d": (14, 0, 0), "30d": (22, 0, 0)}[key]
    assert (local.day, local.hour, local.minute) == expected


@pytest.mark.django_db
def test_the_allocation_series_starts_with_the_window(small_cluster):
    now = datetime(2026, 11, 20, 12, 10, tzinfo=UTC)
    start = window_start(window=WINDOWS["7d"], now=now)
    a100 = DeviceType.objects.get(name="a100")
    for at, allocated in ((start - timedelta(minutes=1), 8), (start, 2)):
        UtilizationSample.objects.create(
            at=at, device_type=a100, devices=8, schedulable=8, allocated=allocated, used=0
        )

    (series,) = allocation_series(window=WINDOWS["7d"], now=now)

    assert [(point.at, point.allocated) for point in series.points] == [(start, 2.0)]


@pytest.mark.django_db
def test_the_pages_say_what_their_window_covers(owner):
    client = logged_in(owner)

    utilization = client.get("/utilization/?window=7d").content.decode()
    fairness = client.get("/fairness/?window=30d").content.decode()

    assert "GPUs allocated vs used, last 7 days, today included" in utilization
    assert "Last 7 days, today included: from <time" in utilization
    assert "Last 30 days, today included, from <time" in fairness
    assert "Last 24 hours, this hour included: from" in client.get("/utilization/").content.decode()
