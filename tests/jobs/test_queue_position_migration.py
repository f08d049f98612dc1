"""Migration jobs 0010 clears the queue position that jobs which left PENDING before
`job_transition` cleared it still carry, so the API stops returning it."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory

migration = importlib.import_module("jobs.migrations.0010_clear_stale_queue_positions")


@pytest.mark.django_db
def test_the_migration_clears_stale_positions_and_the_api_returns_null(owner, api_as):
    pending = JobFactory(owner=owner, queue_position=2)
    # Rows as left before positions were cleared on leaving the queue.
    stale = {
        state: JobFactory(owner=owner, state=state, queue_position=5)
        for state in (JobState.CANCELLED, JobState.RUNNING, JobState.SUCCEEDED)
    }

    migration.clear_stale_queue_positions(apps, None)

    assert Job.objects.get(pk=pending.pk).queue_position == 2
    client = api_as(owner)
    for state, job in stale.items():
        body = client.get(f"/api/v1/jobs/{job.pk}/").json()
        assert (body["state"], body["queue_position"]) == (state.value, None)
    assert client.get(f"/api/v1/jobs/{pending.pk}/").json()["queue_position"] == 2


def test_the_migration_names_the_stored_pending_state():
    assert JobState.PENDING.value == migration.PENDING
