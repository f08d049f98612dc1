"""The Django admin's job page edits what an admin may edit (`notify`) and nothing the
state machine keeps: a form opened before a transition and saved after it must not write
the old state, retries, run time or queue fields back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from jobs.admin import JobAdmin
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import JobSpec, job_finish, job_mark_running, job_start, job_submit
from tests.scheduler.livefixtures import simulated_cluster

pytestmark = pytest.mark.django_db


def _running_job(owner, **fields: Any) -> Job:  # type: ignore[no-untyped-def]
    gpu = simulated_cluster(nodes=1, gpus_per_node=1)[0]
    job = job_submit(owner=owner, spec=JobSpec(image="img:1", command=["true"], **fields))
    job_start(job_id=job.pk, device_ids=[gpu.pk])
    return job_mark_running(job_id=job.pk)


def _opened_form(client: Client, job: Job, **changes: Any) -> dict[str, Any]:
    """The change form's POST body as the browser would send it, from the page as it was
    when the admin opened it, with `changes`."""
    page = client.get(f"/admin/jobs/job/{job.pk}/change/")
    form = page.context["adminform"].form
    data: dict[str, Any] = {
        name: ("" if form[name].value() is None else form[name].value()) for name in form.fields
    }
    data.update(
        {
            "events-TOTAL_FORMS": "0",
            "events-INITIAL_FORMS": "0",
            "events-MIN_NUM_FORMS": "0",
            "events-MAX_NUM_FORMS": "1000",
            "_save": "Save",
        }
    )
    data.update(changes)
    return data


def _admin(lab_admin) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(lab_admin)
    return client


def test_only_notify_is_editable_and_the_rest_is_shown(owner, lab_admin) -> None:  # type: ignore[no-untyped-def]
    job = _running_job(owner)
    page = _admin(lab_admin).get(f"/admin/jobs/job/{job.pk}/change/")

    assert set(page.context["adminform"].form.fields) == {"notify"}
    shown = {
        name for _, options in page.context["adminform"].fieldsets for name in options["fields"]
    }
    fields = {field.name for field in [*Job._meta.concrete_fields, *Job._meta.many_to_many]}
    assert fields - shown == {"id", "updated_at", "session_token"}  # the token: nobody's
    assert "Set with the job page's Keep" in page.content.decode()  # where a keep is given


def test_a_form_saved_after_a_failed_attempt_keeps_its_retry_and_run_time(owner, lab_admin):  # type: ignore[no-untyped-def]
    job = _running_job(owner, max_retries=1, walltime_seconds=3600)
    client = _admin(lab_admin)
    data = _opened_form(client, job, notify="end")  # the admin opens the page...
    # ...meanwhile the attempt ran 50 minutes and failed: a retry is used.
    Allocation.objects.filter(job=job).update(started_at=timezone.now() - timedelta(minutes=50))
    job_finish(job_id=job.pk, exit_code=1)
    job.refresh_from_db()
    before = (
        job.state,
        job.retries_used,
        round(job.total_run_seconds),
        job.pending_since,
        job.reason,
    )

    response = client.post(f"/admin/jobs/job/{job.pk}/change/", data)  # ...then saves

    assert response.status_code == 302
    job.refresh_from_db()
    after = (
        job.state,
        job.retries_used,
        round(job.total_run_seconds),
        job.pending_since,
        job.reason,
    )
    assert after == before
    assert before[:3] == (JobState.PENDING, 1, 3000)
    assert job.notify == "end"


def test_a_form_saved_as_the_job_finishes_does_not_bring_it_back_to_running(
    owner, lab_admin, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    job = _running_job(owner)
    client = _admin(lab_admin)
    data = _opened_form(client, job, notify="all")
    original = JobAdmin.get_object

    def get_object(self, request, object_id, from_field=None):  # type: ignore[no-untyped-def]
        obj = original(self, request, object_id, from_field)
        if request.method == "POST":
            job_finish(job_id=job.pk, exit_code=0)  # an agent's poll lands after the read
        return obj

    monkeypatch.setattr(JobAdmin, "get_object", get_object)
    response = client.post(f"/admin/jobs/job/{job.pk}/change/", data)

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.state, job.notify) == (JobState.SUCCEEDED, "all")
    assert job.finished_at is not None
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_a_save_that_changes_nothing_writes_nothing(owner, lab_admin, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    job = _running_job(owner)
    client = _admin(lab_admin)
    data = _opened_form(client, job)
    original = JobAdmin.get_object

    def get_object(self, request, object_id, from_field=None):  # type: ignore[no-untyped-def]
        obj = original(self, request, object_id, from_field)
        Job.objects.filter(pk=job.pk).update(name="renamed meanwhile")  # after the read
        return obj

    monkeypatch.setattr(JobAdmin, "get_object", get_object)
    updated_at = Job.objects.get(pk=job.pk).updated_at

    assert client.post(f"/admin/jobs/job/{job.pk}/change/", data).status_code == 302
    job.refresh_from_db()
    assert (job.name, job.updated_at) == ("renamed meanwhile", updated_at)
