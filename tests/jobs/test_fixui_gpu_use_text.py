"""The job page's GPU-use chart in numbers: a table per GPU of what the chart shows, for a
screen reader or a browser without JavaScript."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import JobGpuMinute
from jobs.choices import JobState
from tests.factories import JobFactory


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


CELL = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>", re.DOTALL)


def _rows(html: str) -> list[list[str]]:
    body = html[html.index("<tbody>") :]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in CELL.findall(row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    ]


def _summary(page: str) -> str:
    start = page.index('data-refresh-id="job-gpu-summary"')
    return page[start : page.index("</section>", start)]


@pytest.mark.django_db
def test_the_gpu_use_chart_has_each_gpus_mean_use_and_peak_memory_as_a_table(
    owner, small_cluster, settings
):
    settings.TIME_ZONE = "Asia/Kolkata"  # the table's times are the lab's, like the page's
    first, second = small_cluster[0], small_cluster[1]
    job = JobFactory(owner=owner, state=JobState.RUNNING, num_gpus=2)
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=10)
    for offset, (use_first, use_second) in enumerate(((40.0, None), (60.0, None))):
        minute = start + timedelta(minutes=offset)
        for device, use, memory in (
            (first, use_first, 2048 * (offset + 1)),
            (second, use_second, 512),
        ):
            JobGpuMinute.objects.create(
                job=job, device=device, minute=minute, samples=4,
                utilization_avg=use, memory_used_max_mb=memory,
            )  # fmt: skip

    summary = _summary(logged_in(owner).get(f"/jobs/{job.pk}/").content.decode())

    assert "<details>" in summary and "GPU use in numbers" in summary
    rows = _rows(summary)
    local = timezone.localtime(start).strftime("%Y-%m-%d %H:%M")
    later = timezone.localtime(start + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M")
    assert rows == [
        ["a0/0 (a100)", "50 %", "4.0 GiB", local, later],
        ["a0/1 (a100)", "not reported", "0.5 GiB", local, later],
    ]


@pytest.mark.django_db
def test_before_any_reading_the_table_says_there_is_none_yet(owner):
    job = JobFactory(owner=owner, state=JobState.RUNNING)

    summary = _summary(logged_in(owner).get(f"/jobs/{job.pk}/").content.decode())

    assert "No GPU use recorded yet." in summary and "<table>" not in summary
