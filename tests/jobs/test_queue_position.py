"""A job's queue position belongs to PENDING jobs only: cleared as it leaves the queue, and
never shown for a job in another state."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from jobs.choices import JobState
from jobs.models import Job
from jobs.services import job_cancel, job_start
from tests.factories import JobFactory


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_cancelling_a_pending_job_clears_its_queue_position(owner):
    job = JobFactory(owner=owner, queue_position=3, reason="Behind 2 jobs.")
    job_cancel(job_id=job.pk, by=owner)
    assert Job.objects.get(pk=job.pk).queue_position is None


@pytest.mark.django_db
def test_starting_a_pending_job_clears_its_queue_position(owner, small_cluster):
    job = JobFactory(owner=owner, queue_position=1)
    job_start(job_id=job.pk, device_ids=[small_cluster[0].pk])
    assert Job.objects.get(pk=job.pk).queue_position is None


@pytest.mark.django_db
def test_the_pages_show_a_position_only_for_a_pending_job(owner):
    pending = JobFactory(owner=owner, queue_position=2, reason="Behind 1 job.")
    # A row left with a position from before (a round writes PENDING rows only).
    ended = JobFactory(
        owner=owner, state=JobState.CANCELLED, queue_position=3, reason="Cancelled by alice."
    )
    client = logged_in(owner)
    listing = client.get("/jobs/").content.decode()
    assert "#2 · Behind 1 job." in listing
    assert "#3 ·" not in listing and "Cancelled by alice." in listing
    assert re.search(
        r"<dt>Queue position</dt><dd>2</dd>", client.get(f"/jobs/{pending.pk}/").content.decode()
    )
    assert "Queue position" not in client.get(f"/jobs/{ended.pk}/").content.decode()
