"""Demo nodes' simulated jobs: they finish when their work is done, even while preempted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.simulated import simulated_tick
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_mark_running, job_preempt
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, NodeFactory

GRACE_SECONDS = 5


def preempted_sleep(seconds: int, *, ran: float, preempted_ago: float) -> Job:
    """A `sleep <seconds>` job on a demo node that has run `ran` seconds in this attempt and
    was preempted `preempted_ago` seconds ago (its grace period started then)."""
    node = NodeFactory(simulated=True)
    DeviceFactory(node=node, index=0)
    job = started_job(node, command=["sleep", str(seconds)])
    job_mark_running(job_id=job.pk)
    job_preempt(job_id=job.pk, reason="a job of a higher queue waits")
    now = timezone.now()
    started = now - timedelta(seconds=ran)
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(started_at=started)
    Job.objects.filter(pk=job.pk).update(
        started_at=started, updated_at=now - timedelta(seconds=preempted_ago)
    )
    return job


@pytest.mark.django_db
def test_a_preempted_job_whose_work_is_done_within_its_grace_period_succeeds() -> None:
    # 121 s of work; 119 s had run at the preemption, 3 s of the 5 s grace have passed.
    job = preempted_sleep(121, ran=122, preempted_ago=3)

    assert simulated_tick(grace_seconds=GRACE_SECONDS) == 1

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.exit_code == 0
    assert job.preemption_count == 0  # it was not requeued
    assert job.total_run_seconds == pytest.approx(122, abs=2)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_preempted_job_whose_work_is_done_when_the_tick_comes_late_succeeds() -> None:
    # The grace period ended 5 s ago; the work was done 2 s into it.
    job = preempted_sleep(121, ran=129, preempted_ago=10)

    simulated_tick(grace_seconds=GRACE_SECONDS)

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED


@pytest.mark.django_db
def test_a_preempted_job_killed_before_its_work_is_done_is_requeued() -> None:
    # It would have been done 2 s after its grace period ended: the kill came first.
    job = preempted_sleep(121, ran=123, preempted_ago=9)

    simulated_tick(grace_seconds=GRACE_SECONDS)

    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.preemption_count == 1


@pytest.mark.django_db
def test_a_preempted_job_with_work_left_waits_out_its_grace_period() -> None:
    job = preempted_sleep(600, ran=100, preempted_ago=2)

    assert simulated_tick(grace_seconds=GRACE_SECONDS) == 0

    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING
