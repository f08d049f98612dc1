"""Walltime limits: a job that has held devices for its walltime is stopped and fails."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.choices import EventActor, JobState
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_finish, job_preempt, job_requeue, jobs_time_out
from scheduler.services import scheduling_round_run
from tests.jobs.limits import cluster, submit_long_job
from tests.scheduler.livefixtures import age_job, assert_consistent

__all__ = ["cluster"]  # the fixture, imported for the tests below


def running(job: Job) -> Job:
    job.refresh_from_db()
    assert job.state in {JobState.STARTING, JobState.RUNNING}
    return job


@pytest.mark.django_db
def test_a_round_fails_a_job_past_its_walltime_and_gives_its_devices_to_the_next(
    owner, outsider, cluster
):
    limited = submit_long_job(owner, 4, walltime=3600, retries=2)
    scheduling_round_run()
    running(limited)
    waiting = submit_long_job(outsider, 4)
    age_job(limited.pk, seconds=3601)

    scheduling_round_run()

    limited.refresh_from_db()
    assert limited.state == JobState.FAILED
    assert limited.reason == "Walltime exceeded: ran 1:00:01 of its 1:00:00 limit."
    assert limited.exit_code is None
    assert (limited.attempt, limited.retries_used) == (1, 0)  # not retried
    event = JobEvent.objects.filter(job=limited).latest("pk")
    assert event.from_state in {JobState.STARTING, JobState.RUNNING}
    assert (event.to_state, event.actor) == (JobState.FAILED, EventActor.SYSTEM)
    assert not Allocation.objects.filter(job=limited, ended_at__isnull=True).exists()
    # The same round already started the job that was waiting for those devices.
    running(waiting)
    assert_consistent()


@pytest.mark.django_db
def test_jobs_within_their_walltime_or_without_one_keep_running(owner, outsider, cluster):
    within = submit_long_job(owner, 2, walltime=3600)
    unlimited = submit_long_job(outsider, 2)
    scheduling_round_run()
    age_job(within.pk, seconds=3500)
    age_job(unlimited.pk, seconds=10 * 24 * 3600)

    assert jobs_time_out(now=timezone.now()) == []

    assert running(within).reason == ""
    running(unlimited)


@pytest.mark.django_db
def test_the_limit_counts_every_attempt(owner, cluster):
    """Earlier attempts' run time (folded into total_run_seconds) counts with the current."""
    over = submit_long_job(owner, 1, walltime=3600)
    under = submit_long_job(owner, 1, walltime=3600)
    scheduling_round_run()
    for job in (over, under):
        Job.objects.filter(pk=job.pk).update(total_run_seconds=3000.0)
    age_job(over.pk, seconds=700)
    age_job(under.pk, seconds=500)

    assert jobs_time_out(now=timezone.now()) == [over.pk]

    over.refresh_from_db()
    assert over.state == JobState.FAILED
    assert over.reason.startswith("Walltime exceeded: ran 1:01:4")
    running(under)


@pytest.mark.django_db
def test_a_starting_job_is_timed_out_too_but_a_preempting_one_is_left_to_its_stop(
    owner, outsider, cluster
):
    starting = submit_long_job(owner, 2, walltime=600)
    preempting = submit_long_job(outsider, 2, walltime=600)
    scheduling_round_run()
    Job.objects.filter(pk=starting.pk).update(state=JobState.STARTING)
    running(preempting)
    Job.objects.filter(pk=preempting.pk).update(state=JobState.RUNNING)
    job_preempt(job_id=preempting.pk, reason="test")
    for job in (starting, preempting):
        age_job(job.pk, seconds=900)

    assert jobs_time_out(now=timezone.now()) == [starting.pk]

    preempting.refresh_from_db()
    assert preempting.state == JobState.PREEMPTING
    assert_consistent()


@pytest.mark.django_db
def test_a_job_preempted_past_its_walltime_is_not_requeued_and_a_failure_not_retried(
    owner, outsider, cluster
):
    preempted = submit_long_job(owner, 2, walltime=600)
    failing = submit_long_job(outsider, 2, walltime=600, retries=3)
    scheduling_round_run()
    for job in (preempted, failing):
        running(job)
        Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
        age_job(job.pk, seconds=601)
    job_preempt(job_id=preempted.pk, reason="test")

    after_grace = job_requeue(job_id=preempted.pk, message="Checkpointed; requeued.")
    exited = job_finish(job_id=failing.pk, exit_code=1)

    assert after_grace.state == JobState.FAILED
    assert after_grace.reason.startswith("Walltime exceeded: ran 0:10:0")
    assert (exited.state, exited.retries_used, exited.reason) == (
        JobState.FAILED,
        0,
        "Exited with code 1.",
    )
    assert_consistent()
