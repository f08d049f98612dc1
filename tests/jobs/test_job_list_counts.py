"""The state badges of the jobs list count what the table lists: the owner filter too."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.choices import JobState
from tests.factories import JobFactory


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def badge_counts(response) -> dict[str, int]:
    return {value: count for value, _, count in response.context["states"]}


@pytest.mark.django_db
def test_an_admin_filtering_by_owner_sees_only_that_owners_counts(owner, outsider, lab_admin):
    JobFactory(owner=owner, state=JobState.PENDING)
    JobFactory(owner=owner, state=JobState.RUNNING)
    for _ in range(3):
        JobFactory(owner=outsider, state=JobState.PENDING)

    response = logged_in(lab_admin).get("/jobs/", {"owner": "alice"})

    counts = badge_counts(response)
    assert counts[JobState.PENDING] == 1
    assert counts[JobState.RUNNING] == 1
    assert sum(counts.values()) == len(response.context["rows"]) == 2


@pytest.mark.django_db
def test_without_an_owner_filter_an_admin_counts_everyones_jobs(owner, outsider, lab_admin):
    JobFactory(owner=owner, state=JobState.PENDING)
    JobFactory(owner=outsider, state=JobState.PENDING)

    response = logged_in(lab_admin).get("/jobs/")

    assert badge_counts(response)[JobState.PENDING] == 2


@pytest.mark.django_db
def test_a_student_filtering_by_another_owner_sees_no_job_and_no_count(owner, teammate):
    JobFactory(owner=teammate, state=JobState.PENDING)
    JobFactory(owner=owner, state=JobState.RUNNING)

    response = logged_in(owner).get("/jobs/", {"owner": "bob"})

    assert response.status_code == 200
    assert response.context["rows"] == []
    assert sum(badge_counts(response).values()) == 0
