"""One device can never be held by two live allocations: the database refuses it."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from config.errors import IllegalTransition
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_finish, job_mark_running, job_start
from tests.factories import JobFactory


@pytest.mark.django_db
def test_the_database_refuses_a_second_live_allocation_of_a_device(owner, small_cluster):
    device = small_cluster[0]
    first, second = JobFactory(owner=owner), JobFactory(owner=owner)
    now = timezone.now()
    Allocation.objects.create(job=first, attempt=1, device=device, started_at=now)
    # Written straight to the table, bypassing every service: only the index stands guard.
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=second, attempt=1, device=device, started_at=now)


@pytest.mark.django_db
def test_an_ended_allocation_frees_the_device_for_the_next(owner, small_cluster):
    device = small_cluster[0]
    first, second = JobFactory(owner=owner), JobFactory(owner=owner)
    now = timezone.now()
    Allocation.objects.create(job=first, attempt=1, device=device, started_at=now, ended_at=now)
    Allocation.objects.create(job=second, attempt=1, device=device, started_at=now)
    assert Allocation.objects.filter(device=device).count() == 2


@pytest.mark.django_db
def test_starting_on_a_held_device_rolls_back_the_whole_start(owner, small_cluster):
    a, b = small_cluster[0].pk, small_cluster[1].pk
    holder, late = JobFactory(owner=owner, num_gpus=1), JobFactory(owner=owner, num_gpus=2)
    job_start(job_id=holder.pk, device_ids=[a])
    with pytest.raises(IllegalTransition, match="already held"):
        job_start(job_id=late.pk, device_ids=[b, a])
    late.refresh_from_db()
    assert (late.state, late.attempt) == (JobState.PENDING, 0)
    assert not Allocation.objects.filter(job=late).exists()
    assert not late.events.exists()


@pytest.mark.django_db
def test_a_device_is_free_again_once_its_job_finishes(owner, small_cluster):
    device = small_cluster[0].pk
    first, second = JobFactory(owner=owner), JobFactory(owner=owner)
    job_start(job_id=first.pk, device_ids=[device])
    job_mark_running(job_id=first.pk)
    job_finish(job_id=first.pk, exit_code=0)
    assert job_start(job_id=second.pk, device_ids=[device]).state == JobState.STARTING
    assert Job.objects.get(pk=second.pk).allocations.get().ended_at is None
