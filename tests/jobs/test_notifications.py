"""Mail to a job's owner when it starts or ends, as they asked (Slurm's --mail-type)."""

from __future__ import annotations

import smtplib

import pytest
from django.core import mail
from django.test import Client

from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.models import Job
from jobs.notifications import job_notify
from jobs.services import (
    JobSpec,
    job_array_cancel,
    job_cancel,
    job_finish,
    job_mark_running,
    job_start,
    job_submit,
)
from tests.scheduler.livefixtures import simulated_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu():  # type: ignore[no-untyped-def]
    return simulated_cluster(nodes=1, gpus_per_node=1)[0]


def _submit(owner, **fields) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["python", "train.py"], **fields)
    return job_submit(owner=owner, spec=spec)


def _run(job: Job, gpu) -> Job:  # type: ignore[no-untyped-def]
    job_start(job_id=job.pk, device_ids=[gpu.pk])
    return job_mark_running(job_id=job.pk)


@pytest.fixture
def mailed_owner(owner):  # type: ignore[no-untyped-def]
    owner.email = "alice@lab.example"
    owner.save()
    return owner


@pytest.mark.parametrize(
    ("notify", "exit_code", "subjects"),
    [
        ("end", 0, ["succeeded"]),
        ("end", 3, ["failed"]),
        ("fail", 0, []),
        ("fail", 3, ["failed"]),
        ("all", 0, ["started", "succeeded"]),
        ("", 3, []),
    ],
)
def test_the_owner_is_mailed_what_they_asked_for(
    mailed_owner, gpu, notify, exit_code, subjects, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    job = _submit(mailed_owner, name="resnet", notify=notify)

    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job_id=job.pk, exit_code=exit_code)

    assert [m.subject.rsplit(" ", 1)[-1] for m in mail.outbox] == subjects
    assert all(m.to == ["alice@lab.example"] for m in mail.outbox)


def test_the_mail_says_what_happened_and_where_to_look(mailed_owner, gpu, settings) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_SITE_URL = "https://gpulab.example.edu/"
    job = _submit(mailed_owner, name="resnet", notify="fail")
    _run(job, gpu)
    job_finish(job_id=job.pk, exit_code=3)

    assert job_notify(job_id=job.pk, state="FAILED")

    message = mail.outbox[-1]
    assert message.subject == f"[gpulab] Job #{job.pk} resnet failed"
    assert "Exit code: 3." in message.body
    assert f"https://gpulab.example.edu/jobs/{job.pk}/" in message.body


def test_a_cancel_is_mailed_and_a_preemption_is_not(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    job = _submit(mailed_owner, notify="end")
    _run(job, gpu)

    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, by=mailed_owner)

    assert [m.subject.split(" ", 3)[-1] for m in mail.outbox] == [f"{job.name} was cancelled"]


def test_a_rolled_back_transition_mails_nothing(mailed_owner, gpu) -> None:  # type: ignore[no-untyped-def]
    from django.db import transaction

    job = _submit(mailed_owner, notify="all")
    with pytest.raises(RuntimeError), transaction.atomic():
        _run(job, gpu)
        raise RuntimeError("the round failed after the start")

    assert mail.outbox == []
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING


def test_asking_for_mail_needs_an_address_and_a_known_choice(owner, gpu) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationFailed) as no_address:
        _submit(owner, notify="end")
    assert no_address.value.errors == {
        "notify": ["Your account has no email address; ask an admin to add one."]
    }
    owner.email = "alice@lab.example"
    owner.save()
    with pytest.raises(ValidationFailed) as unknown:
        _submit(owner, notify="begin")
    assert list(unknown.value.errors) == ["notify"]
    assert not Job.objects.exists()


def test_a_mail_server_that_refuses_is_logged_not_raised(
    mailed_owner, gpu, monkeypatch, caplog
) -> None:  # type: ignore[no-untyped-def]
    job = _submit(mailed_owner, notify="end")

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise smtplib.SMTPRecipientsRefused({"alice@lab.example": (550, b"no")})

    monkeypatch.setattr("jobs.notifications.send_mail", refuse)

    assert job_notify(job_id=job.pk, state="CANCELLED") is False
    assert "not sent" in caplog.text


def test_with_celery_the_mail_is_a_task_on_the_default_queue(
    mailed_owner, gpu, settings, celery_published, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_SCHEDULER_MODE = "celery"
    job = _submit(mailed_owner, notify="all")
    celery_published()  # the round request the submission asked for

    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)

    tasks = [name for name, _ in celery_published() if name == "jobs.notify"]
    assert tasks == ["jobs.notify"]
    assert mail.outbox == []  # a worker sends it


def test_the_api_and_the_form_take_the_choice(mailed_owner, api_as) -> None:  # type: ignore[no-untyped-def]
    simulated_cluster(nodes=1, gpus_per_node=1)
    made = api_as(mailed_owner).post(
        "/api/v1/jobs/", {"image": "img:1", "command": ["true"], "notify": "fail"}, format="json"
    )
    assert (made.status_code, made.json()["notify"]) == (201, "fail")
    client = Client()
    client.force_login(mailed_owner)
    form = {"image": "img:1", "command": "true", "num_gpus": 1, "consolidation": "preferred",
            "max_retries": 0, "notify": "end"}  # fmt: skip
    page = client.post("/jobs/submit/", form, follow=True).content.decode()
    assert "When it ends, to alice@lab.example" in page


def test_an_array_is_mailed_once_when_its_last_task_ends(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    first = _submit(mailed_owner, name="sweep", notify="all", array_size=3)
    tasks = list(Job.objects.filter(array_id=first.array_id).order_by("array_index"))

    with django_capture_on_commit_callbacks(execute=True):
        _run(tasks[0], gpu)  # no mail for a task's start
        job_finish(job_id=tasks[0].pk, exit_code=0)
        job_cancel(job_id=tasks[1].pk, by=mailed_owner)
    assert mail.outbox == []
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=tasks[2].pk, by=mailed_owner)

    assert [m.subject for m in mail.outbox] == [
        f"[gpulab] Array {first.array_id} (sweep) ended: 2 cancelled, 1 succeeded"
    ]


def test_a_cancelled_array_is_mailed_once_even_while_the_cache_is_down(
    mailed_owner, gpu, monkeypatch, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    from tests.jobs.test_group_webhooks import CacheDown

    first = _submit(mailed_owner, name="sweep", notify="end", array_size=4)
    monkeypatch.setattr("config.fail_open_cache.cache", CacheDown())

    with django_capture_on_commit_callbacks(execute=True):
        job_array_cancel(array_id=first.array_id, by=mailed_owner)

    assert [m.subject for m in mail.outbox] == [
        f"[gpulab] Array {first.array_id} (sweep) ended: 4 cancelled"
    ]


def test_a_mail_that_cannot_be_sent_never_fails_the_change_that_asked_for_it(
    mailed_owner, gpu, settings, monkeypatch, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    job = _submit(mailed_owner, name="two\nlines", notify="end")
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, by=mailed_owner)  # a line break in the name
    assert mail.outbox[-1].subject == f"[gpulab] Job #{job.pk} two lines was cancelled"

    settings.GPULAB_SCHEDULER_MODE = "celery"
    other = _submit(mailed_owner, notify="end")

    def broker_down(**kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionError("broker down")

    monkeypatch.setattr("jobs.tasks.job_notify_task.delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=other.pk, by=mailed_owner)  # does not raise
    assert Job.objects.get(pk=other.pk).state == JobState.CANCELLED
