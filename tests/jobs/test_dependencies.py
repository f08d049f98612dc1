"""Job dependencies (Slurm's --dependency afterok / afterany): a job waits, held with a
reason, until the jobs it names have succeeded (or ended); one that can never be satisfied
says so and stays for its owner to cancel. Students name only their own jobs."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from accounts.choices import Role
from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_start, job_submit
from scheduler.services import scheduling_round_run
from tests.factories import JobFactory
from tests.scheduler.livefixtures import age_job, configure_tiresias_rules, simulated_cluster

pytestmark = pytest.mark.django_db


def _submit(owner, **fields) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "5"], **fields)
    return job_submit(owner=owner, spec=spec)


def _finish(job: Job, state: JobState) -> None:
    Job.objects.filter(pk=job.pk).update(state=state)


@pytest.fixture
def cluster() -> None:
    configure_tiresias_rules()
    simulated_cluster(nodes=1, gpus_per_node=4)


def test_an_afterok_job_waits_until_every_job_it_names_has_succeeded(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = JobFactory(owner=owner, state=JobState.RUNNING)
    second = JobFactory(owner=owner, state=JobState.SUCCEEDED)
    after = _submit(owner, depends_on=[first.pk, second.pk])

    scheduling_round_run()

    after.refresh_from_db()
    assert after.state == JobState.PENDING
    assert after.reason == f"Dependency: waits for job #{first.pk} to succeed"
    assert after.queue_position is None  # not in line while it cannot start
    _finish(first, JobState.SUCCEEDED)
    scheduling_round_run()
    after.refresh_from_db()
    assert after.state == JobState.STARTING


def test_an_afterany_job_starts_once_they_ended_however(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = JobFactory(owner=owner, state=JobState.PENDING, num_gpus=8)  # never fits
    after = _submit(owner, depends_on=[first.pk], dependency="afterany")
    scheduling_round_run()
    after.refresh_from_db()
    assert after.reason == f"Dependency: waits for job #{first.pk} to end"

    _finish(first, JobState.FAILED)
    scheduling_round_run()

    after.refresh_from_db()
    assert after.state == JobState.STARTING


def test_an_afterok_job_whose_dependency_failed_says_it_never_starts(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = JobFactory(owner=owner, state=JobState.RUNNING)
    after = _submit(owner, depends_on=[first.pk])
    _finish(first, JobState.FAILED)

    scheduling_round_run()
    scheduling_round_run()  # stays so: nothing cancels it behind its owner's back

    after.refresh_from_db()
    assert after.state == JobState.PENDING
    assert after.reason == (
        f"DependencyNeverSatisfied: job #{first.pk} ended without succeeding; cancel this "
        "job, or submit it again without that dependency"
    )


def test_a_submission_names_only_the_owners_jobs_and_no_dependency_that_already_failed(
    owner, outsider, lab_admin, cluster
) -> None:  # type: ignore[no-untyped-def]
    theirs = JobFactory(owner=outsider)
    failed = JobFactory(owner=owner, state=JobState.CANCELLED)

    with pytest.raises(ValidationFailed) as refused:
        _submit(owner, depends_on=[theirs.pk, 999999])
    assert refused.value.errors == {"depends_on": [f"No job {theirs.pk}, 999999 of yours."]}
    with pytest.raises(ValidationFailed) as never:
        _submit(owner, depends_on=[failed.pk])
    assert "ended without succeeding" in never.value.errors["depends_on"][0]
    for bad in ([True], ["12"], [1, 1], 12, [2**63], [0]):
        with pytest.raises(ValidationFailed) as shape:
            _submit(owner, depends_on=bad)
        assert list(shape.value.errors) == ["depends_on"]
    with pytest.raises(ValidationFailed) as kind:
        _submit(owner, depends_on=[failed.pk], dependency="afternotok")
    assert list(kind.value.errors) == ["dependency"]
    assert not Job.objects.exclude(pk__in=[theirs.pk, failed.pk]).exists()  # nothing stored

    assert _submit(owner, depends_on=[failed.pk], dependency="afterany").pk
    assert _submit(lab_admin, depends_on=[theirs.pk]).pk  # an admin may wait for anyone's


def test_the_api_takes_and_shows_dependencies(owner, api_as, cluster) -> None:  # type: ignore[no-untyped-def]
    first = JobFactory(owner=owner, state=JobState.RUNNING)
    client = api_as(owner)

    made = client.post(
        "/api/v1/jobs/",
        {"image": "img:1", "command": ["true"], "depends_on": [first.pk]},
        format="json",
    )
    refused = client.post(
        "/api/v1/jobs/",
        {"image": "img:1", "command": ["true"], "depends_on": "12"},
        format="json",
    )

    assert made.status_code == 201
    assert (made.json()["depends_on"], made.json()["dependency"]) == ([first.pk], "afterok")
    listed = client.get("/api/v1/jobs/").json()["results"]
    assert [job["depends_on"] for job in listed] == [[first.pk], []]
    assert refused.status_code == 400 and "depends_on" in refused.json()


def test_a_student_never_reads_another_students_job_id_in_a_dependency_reason(
    owner, outsider, lab_admin, api_as, cluster
) -> None:  # type: ignore[no-untyped-def]
    theirs = JobFactory(owner=outsider, state=JobState.RUNNING)
    waiting = _submit(lab_admin, depends_on=[theirs.pk])  # an admin's job may name anyone's
    scheduling_round_run()
    client = Client()
    client.force_login(lab_admin)

    page = client.get(f"/jobs/{waiting.pk}/").content.decode()

    assert f"waits for job #{theirs.pk} to succeed" in page
    assert f'href="/jobs/{theirs.pk}/"' in page
    queue = api_as(owner).get("/api/v1/queue/").content.decode()
    assert "waits for another job to succeed" in queue
    assert f"#{theirs.pk}" not in queue


def test_the_form_takes_job_ids_and_the_page_shows_what_the_job_waits_for(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = JobFactory(owner=owner, state=JobState.RUNNING)
    client = Client()
    client.force_login(owner)
    form = {
        "image": "img:1", "command": "python train.py", "num_gpus": 1,
        "consolidation": "preferred", "max_retries": 0, "dependency": "afterany",
    }  # fmt: skip

    bad = client.post("/jobs/submit/", {**form, "depends_on": "12x"})
    assert "Not a job id: 12x." in bad.content.decode()
    done = client.post("/jobs/submit/", {**form, "depends_on": f"#{first.pk}"}, follow=True)

    job = Job.objects.exclude(pk=first.pk).get()
    assert list(job.depends_on.values_list("pk", flat=True)) == [first.pk]
    assert job.dependency == "afterany"
    assert f'<a href="/jobs/{first.pk}/">#{first.pk}</a> (running) to end' in done.content.decode()


def test_time_held_by_a_dependency_is_not_waiting_for_the_starvation_guard(owner) -> None:  # type: ignore[no-untyped-def]
    # Default settings: a job waiting over an hour may preempt (the starvation guard).
    gpus = simulated_cluster(nodes=1, gpus_per_node=4)
    veteran = job_start(job_id=_submit(owner, num_gpus=4).pk, device_ids=[g.pk for g in gpus])
    Job.objects.filter(pk=veteran.pk).update(state=JobState.RUNNING)
    age_job(veteran.pk, seconds=1000)
    first = JobFactory(owner=owner, state=JobState.SUCCEEDED, finished_at=timezone.now())
    released = _submit(owner, num_gpus=2, depends_on=[first.pk])
    age_job(released.pk, seconds=2 * 3600)  # submitted two hours ago, held until now

    result = scheduling_round_run()

    assert result.preemptions == 0
    assert Job.objects.get(pk=veteran.pk).state == JobState.RUNNING


def test_the_admin_shows_dependencies_read_only_and_keeps_a_job_others_wait_for(
    owner, lab_admin, cluster
) -> None:  # type: ignore[no-untyped-def]
    failed = JobFactory(owner=owner, state=JobState.RUNNING)
    waiting = _submit(owner, depends_on=[failed.pk])
    Job.objects.filter(pk=failed.pk).update(state=JobState.FAILED)
    running = JobFactory(owner=owner, state=JobState.RUNNING)
    client = Client()
    client.force_login(lab_admin)

    change = client.get(f"/admin/jobs/job/{waiting.pk}/change/").content.decode()
    assert 'name="depends_on"' not in change  # no editable list of every job
    single = client.post(f"/admin/jobs/job/{failed.pk}/delete/", {"post": "yes"})
    bulk = client.post(
        "/admin/jobs/job/",
        {"action": "delete_selected", "_selected_action": [failed.pk], "post": "yes"},
    )
    client.post(
        "/admin/jobs/job/",
        {"action": "delete_selected", "_selected_action": [running.pk], "post": "yes"},
    )

    assert Job.objects.filter(pk__in=[failed.pk, running.pk]).count() == 2
    assert f"job(s) #{waiting.pk} wait for it" in single.content.decode()
    assert f"job(s) #{waiting.pk} wait for it" in bulk.content.decode()
    scheduling_round_run()
    assert Job.objects.get(pk=waiting.pk).reason.startswith("DependencyNeverSatisfied")


def test_a_huge_id_in_the_form_is_a_field_error(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(owner)
    form = {"image": "img:1", "command": "true", "num_gpus": 1, "consolidation": "preferred",
            "max_retries": 0, "depends_on": "9" * 5000}  # fmt: skip

    response = client.post("/jobs/submit/", form)

    assert response.status_code == 400
    assert "Not a job id" in response.content.decode()


def test_ids_a_viewer_may_not_see_read_null_in_the_api(
    owner, outsider, lab_admin, api_as, cluster
) -> None:  # type: ignore[no-untyped-def]
    theirs = JobFactory(owner=outsider, state=JobState.RUNNING)
    mine = JobFactory(owner=lab_admin, state=JobState.RUNNING)
    waiting = _submit(lab_admin, depends_on=[theirs.pk, mine.pk])
    lab_admin.role = Role.STUDENT  # demoted: now sees only their own jobs
    lab_admin.save()

    detail = api_as(lab_admin).get(f"/api/v1/jobs/{waiting.pk}/").json()
    listed = api_as(lab_admin).get("/api/v1/jobs/").json()["results"]

    # Sorted by id before hiding: `theirs` was made first.
    assert detail["depends_on"] == [None, mine.pk]
    assert all(theirs.pk not in job["depends_on"] for job in listed)
