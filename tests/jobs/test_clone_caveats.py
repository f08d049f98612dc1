"""Clone and resubmit says what the copy loses: an array task's GPULAB_ARRAY_INDEX (set at
launch, and reserved in a submitted environment), and it keeps saying so after a refused
submission of the copy."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.models import Job
from jobs.services import JobSpec, job_submit
from jobs.validation import env_errors

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("small_cluster")]


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def task_3(owner) -> Job:
    """Task 3 of a 4-task array."""
    spec = JobSpec(image="busybox", command=["python", "sweep.py"], name="lr", array_size=4)
    first = job_submit(owner=owner, spec=spec)
    return Job.objects.get(array_id=first.array_id, array_index=3)


def test_the_index_cannot_be_carried_in_the_environment() -> None:
    # Why the clone says so rather than prefilling GPULAB_ARRAY_INDEX=3: it would be refused.
    assert env_errors({"GPULAB_ARRAY_INDEX": "3"}) == [
        "GPULAB_ARRAY_INDEX is set by gpulab itself and cannot be overridden."
    ]


def test_a_clone_of_an_array_task_says_it_runs_as_one_job_without_the_index(owner, task_3):
    response = logged_in(owner).get("/jobs/submit/", {"clone": task_3.pk})

    html = response.content.decode()
    caveat = (
        f"This is task 3 of array {task_3.array_id} (4 tasks): the copy runs as a single job, "
        "without GPULAB_ARRAY_INDEX"
    )
    assert caveat in html
    # Nothing the submission would refuse is pre-filled, and the copy is not an array.
    form = response.context["form"]
    assert "GPULAB_" not in form.initial["env"] and "array_size" not in form.initial


def test_a_clone_of_a_plain_job_has_no_array_caveat(owner):
    job = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"]))
    html = logged_in(owner).get("/jobs/submit/", {"clone": job.pk}).content.decode()
    assert "A copy of" in html and "This is task" not in html


def test_a_refused_copy_keeps_its_note_and_caveats(owner, task_3):
    response = logged_in(owner).post(
        f"/jobs/submit/?clone={task_3.pk}", {"image": "", "command": "python sweep.py"}
    )

    assert response.status_code == 400
    html = response.content.decode()
    assert f'A copy of <a href="/jobs/{task_3.pk}/">job #{task_3.pk}' in html
    assert f"This is task 3 of array {task_3.array_id}" in html


def test_a_refused_post_with_a_clone_of_no_visible_job_just_has_no_note(owner, outsider):
    theirs = job_submit(owner=outsider, spec=JobSpec(image="busybox", command=["carol-only-cmd"]))
    response = logged_in(owner).post(f"/jobs/submit/?clone={theirs.pk}", {"image": ""})
    assert response.status_code == 400
    assert b"A copy of" not in response.content and b"carol-only-cmd" not in response.content
