"""A program name with '=' is refused at submission, a reason longer than its column is
cut rather than failing the transition (which left a job STARTING on its GPU for ever),
and a job id too long to be one is not read as a job."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.services import agent_launch
from cluster.choices import Runtime
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.selectors import texts_for_viewer
from jobs.services import REASON_MAX_LENGTH, job_launch_failed, job_start
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory

SUBMIT = {"image": "pytorch/pytorch:2.4.0", "num_gpus": 1}


@pytest.mark.django_db
@pytest.mark.parametrize("program", ["A=1", "train=" + "x" * 600, "./run=fast"])
def test_a_program_name_with_an_equals_sign_is_a_400_naming_command(
    owner, small_cluster, api_as, program
):
    response = api_as(owner).post(
        "/api/v1/jobs/", {**SUBMIT, "command": [program, "--x=1"]}, format="json"
    )
    assert response.status_code == 400, response.content
    [message] = response.json()["command"]
    assert "'='" in message
    assert len(message) < 300  # the program itself is not quoted back
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_an_equals_sign_in_a_later_argument_is_fine(owner, small_cluster, api_as):
    response = api_as(owner).post(
        "/api/v1/jobs/", {**SUBMIT, "command": ["python", "--lr=0.1"]}, format="json"
    )
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_the_submit_form_refuses_such_a_program_too(owner, small_cluster):
    client = Client()
    client.force_login(owner)
    form = {**SUBMIT, "command": "A=1 python", "consolidation": "preferred", "max_retries": "0"}
    response = client.post("/jobs/submit/", form)
    assert response.status_code == 400
    [message] = response.context["form"].errors["command"]
    assert "may not contain '='" in message
    assert not Job.objects.exists()


def _starting_job(command: list[str]) -> Job:
    node = NodeFactory(name="p0", runtime=Runtime.PROCESS)
    device = DeviceFactory(node=node, index=0, device_type=DeviceTypeFactory(name="a100"))
    job = JobFactory(command=command)
    return job_start(job_id=job.pk, device_ids=[device.pk])


@pytest.mark.django_db
def test_a_failure_message_longer_than_the_reason_column_fails_the_job_with_it_cut():
    job = _starting_job(["python"])
    message = "Launch refused: " + "x" * 2000

    failed = job_launch_failed(job_id=job.pk, message=message)

    assert failed.state == JobState.FAILED
    assert len(failed.reason) == REASON_MAX_LENGTH
    assert failed.reason == message[: REASON_MAX_LENGTH - 1] + "…"
    assert failed.events.last().message == message  # the event keeps all of it
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_stored_job_whose_program_has_an_equals_sign_fails_at_launch_and_frees_its_gpu():
    # Submitted before '=' was refused: the process runtime cannot start it.
    job = _starting_job(["A=" + "x" * 600])

    agent_launch(job_id=job.pk, attempt=job.attempt)

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "'='" in job.reason and len(job.reason) <= REASON_MAX_LENGTH
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("digits", ["9" * 19, "9" * 30, "9" * 5000])
def test_a_number_too_long_to_be_a_job_id_in_a_text_is_left_alone(owner, digits):
    text = f"exec: job {digits}: not found"
    assert texts_for_viewer([text], user=owner) == [text]


@pytest.mark.django_db
def test_other_students_jobs_are_still_hidden_in_texts(owner, outsider):
    theirs, mine = JobFactory(owner=outsider), JobFactory(owner=owner)
    texts = [f"Behind job #{theirs.pk}", f"after job {mine.pk}", f"job 000{theirs.pk} first"]
    assert texts_for_viewer(texts, user=owner) == [
        "Behind another job",
        f"after job {mine.pk}",
        "another job first",
    ]
