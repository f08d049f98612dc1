"""The job page renders every auto-refreshed region whatever it holds, so a refresh can
bring in what a later state shows (gpulab.js swaps only regions it finds on the fresh page)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory
from tests.scheduler.livefixtures import configure

pytestmark = pytest.mark.django_db


def page_of(user, job: Job) -> str:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client.get(f"/jobs/{job.pk}/").content.decode()


def idle_region(html: str) -> str:
    match = re.search(r'<div data-refresh-id="job-idle">(.*?)</div>', html, re.DOTALL)
    assert match, "the idle region is missing"
    return match.group(1)


@pytest.fixture
def reaping() -> None:
    configure(idle_reap=True, idle_threshold_pct=5.0, idle_window_minutes=60, idle_grace_minutes=30)


@pytest.mark.usefixtures("reaping")
def test_the_idle_region_is_there_without_a_warning_and_holds_one_when_warned(owner):
    job = JobFactory(owner=owner, state=JobState.RUNNING)

    assert "Idle:" not in idle_region(page_of(owner, job))

    Job.objects.filter(pk=job.pk).update(idle_warned_at=timezone.now())
    warned = idle_region(page_of(owner, job))
    assert 'class="card warning" role="alert"' in warned and "Idle: this job will be" in warned


def test_a_finished_jobs_page_has_the_idle_region_too(owner):
    assert (
        idle_region(page_of(owner, JobFactory(owner=owner, state=JobState.SUCCEEDED))).strip() == ""
    )


@pytest.mark.usefixtures("reaping")
def test_the_keep_choice_marks_its_first_option_as_the_default(owner, lab_admin):
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    html = page_of(lab_admin, job)
    select = re.search(r'<select id="keep-hours"[^>]*>(.*?)</select>', html).group(1)
    assert re.findall(r"<option [^>]*selected[^>]*>([^<]*)<", select) == ["24 hours"]
