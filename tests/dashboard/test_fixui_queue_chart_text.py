"""The queue page's charts in words: each has its numbers as text and a table under it, so a
screen reader, or a browser without JavaScript, gets what the chart shows."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import QueueSample
from dashboard.services import aggregates_update
from jobs.choices import JobState
from tests.dashboard.helpers import logged_in
from tests.factories import JobFactory


def _section(page: str, data_refresh_id: str) -> str:
    """The HTML of one refreshed region, up to the end of its <section>."""
    start = page.index(f'data-refresh-id="{data_refresh_id}"')
    return page[start : page.index("</section>", start)]


def _rows(html: str) -> list[list[str]]:
    body = html[html.index("<tbody>") : html.index("</tbody>")]
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    ]


@pytest.mark.django_db
def test_the_queue_length_chart_has_each_levels_latest_peak_and_mean_as_a_table(owner):
    now = timezone.now()
    samples = ((50, 0, 2), (30, 0, 5), (10, 0, 3), (10, 1, 1), (10, 2, 0))
    for minutes_ago, level, pending in samples:
        QueueSample.objects.create(
            at=now - timedelta(minutes=minutes_ago), level=level,
            pending_jobs=pending, pending_gpus=pending,
        )  # fmt: skip
    QueueSample.objects.create(  # older than the chart's 24 h: not counted
        at=now - timedelta(hours=30), level=0, pending_jobs=99, pending_gpus=99
    )

    page = logged_in(owner).get("/queue/").content.decode()

    summary = _section(page, "queue-length-summary")
    sentence = re.sub(r"\s+", " ", summary)
    assert "4 jobs pending: 3 in queue 0, 1 in queue 1." in sentence  # empty levels unnamed
    assert "<details>" in summary and "Pending jobs per queue level, last 24 h" in summary
    assert _rows(summary) == [
        ["0", "3", "5", "3.3"],
        ["1", "1", "1", "1.0"],
        ["2", "0", "0", "0.0"],
    ]


@pytest.mark.django_db
def test_the_table_is_there_too_once_an_aggregation_run_caches_the_chart(owner):
    QueueSample.objects.create(at=timezone.now(), level=0, pending_jobs=4, pending_gpus=4)
    aggregates_update()  # samples the (empty) queue too, and opens a cache generation

    page = logged_in(owner).get("/queue/").content.decode()

    assert _rows(_section(page, "queue-length-summary"))[0][:3] == ["0", "0", "4"]


@pytest.mark.django_db
def test_without_samples_the_queue_length_chart_says_so(owner):
    page = logged_in(owner).get("/queue/").content.decode()

    assert "No samples in the last 24 h yet" in _section(page, "queue-length-summary")


@pytest.mark.django_db
def test_the_waiting_times_chart_has_its_bins_as_a_table(owner):
    now = timezone.now()
    for minutes in (3, 3, 200):
        job = JobFactory(owner=owner, state=JobState.SUCCEEDED)
        job.first_started_at = now - timedelta(minutes=1)
        job.submitted_at = job.first_started_at - timedelta(minutes=minutes)
        job.save()
    JobFactory(owner=owner, queue_position=1, pending_since=now - timedelta(minutes=30))

    page = logged_in(owner).get("/queue/").content.decode()

    summary = _section(page, "queue-waits-summary")
    assert "3 jobs started in the last 7 days; 1 is waiting now." in summary
    rows = {label: (started, waiting) for label, started, waiting in _rows(summary)}
    assert rows["1–5 min"] == ("2", "0")
    assert rows["3–12 h"] == ("1", "0")
    assert rows["15–60 min"] == ("0", "1")
    assert len(rows) == 8  # every bin, empty ones too, as the chart has them
