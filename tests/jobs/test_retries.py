"""max_retries: a failed attempt is retried after a backoff while retries are left."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.choices import EventActor, JobState
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_finish, job_preempt, retry_backoff_seconds
from scheduler.services import scheduling_round_run
from tests.jobs.limits import cluster, submit_long_job
from tests.scheduler.livefixtures import age_job, assert_consistent

__all__ = ["cluster"]  # the fixture, imported for the tests below


def started(job: Job) -> Job:
    """Run a round and make the job RUNNING, as its agent would."""
    scheduling_round_run()
    job.refresh_from_db()
    assert job.state in {JobState.STARTING, JobState.RUNNING}
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job.refresh_from_db()
    return job


def test_the_backoff_doubles_from_a_minute_up_to_an_hour():
    assert [retry_backoff_seconds(n) for n in range(1, 9)] == [
        60, 120, 240, 480, 960, 1920, 3600, 3600,
    ]  # fmt: skip


@pytest.mark.django_db
def test_a_failed_attempt_with_retries_left_goes_back_to_pending_with_a_backoff(owner, cluster):
    job = started(submit_long_job(owner, retries=2))
    before = timezone.now()

    retried = job_finish(job_id=job.pk, exit_code=3)

    assert retried.state == JobState.PENDING
    assert (retried.retries_used, retried.exit_code, retried.finished_at) == (1, 3, None)
    assert retried.reason == "Exited with code 3; retry 1 of 2 after a 60 s backoff."
    assert before + timedelta(seconds=59) < retried.retry_not_before
    assert retried.retry_not_before <= timezone.now() + timedelta(seconds=60)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    event = JobEvent.objects.filter(job=job).latest("pk")
    assert (event.from_state, event.to_state, event.actor) == (
        JobState.RUNNING,
        JobState.PENDING,
        EventActor.AGENT,
    )
    assert event.message == "Exited with code 3. Requeued: retry 1 of 2 after a 60 s backoff."
    assert_consistent()


@pytest.mark.django_db
def test_the_round_waits_out_the_backoff_then_starts_the_retry(owner, cluster):
    job = started(submit_long_job(owner, retries=1))
    job_finish(job_id=job.pk, exit_code=1)

    scheduling_round_run()
    job.refresh_from_db()
    assert job.state == JobState.PENDING  # the backoff is not over
    assert job.reason.startswith("Exited with code 1; retry 1 of 1")

    Job.objects.filter(pk=job.pk).update(retry_not_before=timezone.now() - timedelta(seconds=1))
    scheduling_round_run()
    job.refresh_from_db()
    assert job.state in {JobState.STARTING, JobState.RUNNING}
    assert (job.attempt, job.retries_used, job.retry_not_before) == (2, 1, None)


@pytest.mark.django_db
def test_a_retry_has_waited_only_since_its_backoff_ended(owner, cluster):
    """The backoff is the failed job's own penalty, not time the scheduler kept it waiting:
    the starvation knob's δ, folded in when the retry starts, counts from its end."""
    job = started(submit_long_job(owner, retries=1))
    age_job(job.pk, seconds=120)  # it has run, so its waiting counts towards the knob
    job_finish(job_id=job.pk, exit_code=1)
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        pending_since=now - timedelta(hours=1), retry_not_before=now - timedelta(seconds=30)
    )

    job = started(job)

    assert job.waiting_since_promotion == pytest.approx(30, abs=5)  # not the hour since failing


@pytest.mark.django_db
def test_the_last_retry_fails_for_good_and_backoffs_grow(owner, cluster):
    job = started(submit_long_job(owner, retries=2))
    job_finish(job_id=job.pk, exit_code=1)
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = started(job)

    second = job_finish(job_id=job.pk, exit_code=1)
    assert second.reason == "Exited with code 1; retry 2 of 2 after a 120 s backoff."
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = started(job)

    failed = job_finish(job_id=job.pk, exit_code=7)
    assert (failed.state, failed.retries_used, failed.exit_code) == (JobState.FAILED, 2, 7)
    assert failed.reason == "Exited with code 7."


@pytest.mark.django_db
def test_success_and_jobs_without_retries_are_not_retried(owner, outsider, cluster):
    succeeding = started(submit_long_job(owner, retries=3))
    no_retries = started(submit_long_job(outsider, retries=0))

    assert job_finish(job_id=succeeding.pk, exit_code=0).state == JobState.SUCCEEDED
    assert job_finish(job_id=no_retries.pk, exit_code=2).state == JobState.FAILED


@pytest.mark.django_db
def test_an_exit_during_a_preemption_grace_period_uses_a_retry_too(owner, cluster):
    job = started(submit_long_job(owner, retries=1))
    job_preempt(job_id=job.pk, reason="test")

    retried = job_finish(job_id=job.pk, exit_code=137)

    assert (retried.state, retried.retries_used) == (JobState.PENDING, 1)
    assert JobEvent.objects.filter(job=job).latest("pk").from_state == JobState.PREEMPTING


@pytest.mark.django_db
def test_the_api_shows_retries_to_the_owner_only(owner, outsider, cluster, api_as):
    job = started(submit_long_job(owner, retries=1))
    job_finish(job_id=job.pk, exit_code=1)

    body = api_as(owner).get(f"/api/v1/jobs/{job.pk}/").json()
    assert (body["state"], body["retries_used"], body["max_retries"]) == ("PENDING", 1, 1)
    assert body["retry_not_before"] is not None
    assert api_as(outsider).get(f"/api/v1/jobs/{job.pk}/").status_code == 404


@pytest.mark.django_db
def test_the_job_page_shows_the_next_try_and_the_walltime_used(owner, outsider, cluster, client):
    job = started(submit_long_job(owner, walltime=3600, retries=2))
    # 10 min in earlier attempts, 5 min in this one.
    Job.objects.filter(pk=job.pk).update(
        total_run_seconds=600.0, started_at=timezone.now() - timedelta(seconds=300)
    )
    client.force_login(owner)

    running_page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "60 min · 15 min used (all attempts)" in running_page

    retried = job_finish(job_id=job.pk, exit_code=1)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    next_try = timezone.localtime(retried.retry_not_before).strftime("%H:%M:%S")
    assert f"retries used 1 of 2, next try not before {next_try}" in page
    assert "Exited with code 1; retry 1 of 2 after a 60 s backoff." in page
    client.force_login(outsider)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
