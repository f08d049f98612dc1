"""The owner's mail about an array whose failed task was not the last to end, and the
"started" mail of a job that runs several times (resumed after a preemption, retried)."""

from __future__ import annotations

import pytest
from django.core import mail

from jobs.models import Job
from jobs.services import (
    JobSpec,
    job_array_cancel,
    job_finish,
    job_mark_running,
    job_preempt,
    job_requeue,
    job_start,
    job_submit,
)
from tests.scheduler.livefixtures import simulated_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu():  # type: ignore[no-untyped-def]
    return simulated_cluster(nodes=1, gpus_per_node=1)[0]


@pytest.fixture
def mailed_owner(owner):  # type: ignore[no-untyped-def]
    owner.email = "alice@lab.example"
    owner.save()
    return owner


def _array(owner, size: int, notify: str) -> list[Job]:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="img:1", command=["true"], name="sweep", notify=notify, array_size=size)
    first = job_submit(owner=owner, spec=spec)
    return list(Job.objects.filter(array_id=first.array_id).order_by("array_index"))


def _run_and_finish(task: Job, gpu, exit_code: int) -> None:  # type: ignore[no-untyped-def]
    job_start(job_id=task.pk, device_ids=[gpu.pk])
    job_mark_running(job_id=task.pk)
    job_finish(job_id=task.pk, exit_code=exit_code)


def test_notify_fail_mails_an_array_whose_last_task_to_end_succeeded(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    t0, t1 = _array(mailed_owner, 2, "fail")

    with django_capture_on_commit_callbacks(execute=True):
        _run_and_finish(t0, gpu, exit_code=3)  # FAILED, first
    assert mail.outbox == []  # a task is still to end
    with django_capture_on_commit_callbacks(execute=True):
        _run_and_finish(t1, gpu, exit_code=0)  # SUCCEEDED, the last

    assert [m.subject for m in mail.outbox] == [
        f"[gpulab] Array {t0.array_id} (sweep) ended: 1 failed, 1 succeeded"
    ]


def test_notify_fail_mails_an_array_cancelled_after_a_task_failed(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    t0, _, _ = _array(mailed_owner, 3, "fail")
    with django_capture_on_commit_callbacks(execute=True):
        _run_and_finish(t0, gpu, exit_code=3)

    with django_capture_on_commit_callbacks(execute=True):
        job_array_cancel(array_id=t0.array_id, by=mailed_owner)

    assert [m.subject for m in mail.outbox] == [
        f"[gpulab] Array {t0.array_id} (sweep) ended: 2 cancelled, 1 failed"
    ]


def test_notify_fail_mails_nothing_when_every_task_succeeded(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    tasks = _array(mailed_owner, 2, "fail")

    with django_capture_on_commit_callbacks(execute=True):
        for task in tasks:
            _run_and_finish(task, gpu, exit_code=0)

    assert mail.outbox == []


def test_an_array_ending_in_one_commit_is_mailed_once(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """Every task's end asks for the array's mail, and here each finds the array ended
    (the callbacks run after all of them): the claim lets one through."""
    tasks = _array(mailed_owner, 3, "fail")

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        _run_and_finish(tasks[0], gpu, exit_code=3)
        job_array_cancel(array_id=tasks[0].array_id, by=mailed_owner)

    assert len(callbacks) >= 3
    assert len(mail.outbox) == 1


def test_notify_all_mails_the_first_start_only(
    mailed_owner, gpu, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="img:1", command=["true"], notify="all", max_retries=2)
    job = job_submit(owner=mailed_owner, spec=spec)

    with django_capture_on_commit_callbacks(execute=True):
        job_start(job_id=job.pk, device_ids=[gpu.pk])
        job_mark_running(job_id=job.pk)
        job_preempt(job_id=job.pk, reason="LAS: a job with less service")
        job_requeue(job_id=job.pk, message="requeued")
        job_start(job_id=job.pk, device_ids=[gpu.pk])
        job_mark_running(job_id=job.pk)  # resumed
        job_finish(job_id=job.pk, exit_code=1)  # a retry is left
        Job.objects.filter(pk=job.pk).update(retry_not_before=None)
        job_start(job_id=job.pk, device_ids=[gpu.pk])
        job_mark_running(job_id=job.pk)  # retried
        job_finish(job_id=job.pk, exit_code=0)

    assert [m.subject.rsplit(" ", 1)[-1] for m in mail.outbox] == ["started", "succeeded"]
