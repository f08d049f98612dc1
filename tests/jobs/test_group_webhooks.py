"""A lab group's jobs posted to the group's own webhook (jobs/webhooks.py), received by a
real HTTP server on loopback: starts and ends whatever `notify` says, an array once as a
whole, nothing for a group without a webhook, never the command or a session's secrets,
and a receiver that fails, or a URL cleared meanwhile, never fails the change."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from accounts.models import LabGroup
from accounts.services import user_create
from agents.tasks import webhook_post_task
from dashboard.templatetags.gpulab_format import duration
from jobs.choices import EventActor, JobState
from jobs.models import Allocation, Job
from jobs.services import (
    JobSpec,
    job_array_cancel,
    job_cancel,
    job_finish,
    job_mark_lost,
    job_mark_running,
    job_requeue,
    job_start,
    job_submit,
    job_transition,
)
from tests.scheduler.livefixtures import simulated_cluster
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.django_db

SITE = "https://gpulab.example.edu"
SECRET = "hunter2-do-not-post"


@pytest.fixture
def gpu():  # type: ignore[no-untyped-def]
    return simulated_cluster(nodes=1, gpus_per_node=1)[0]


@pytest.fixture
def hook(vision: LabGroup, settings: Any) -> Iterator[Receiver]:
    """The vision group's channel (the owner's group); the admins' webhook is elsewhere."""
    receiver = Receiver(path="/hooks/vision-SECRETPATH")
    vision.webhook_url = receiver.url
    vision.save(update_fields=["webhook_url"])
    settings.GPULAB_SITE_URL = SITE
    settings.GPULAB_ADMIN_WEBHOOK_URL = ""
    yield receiver
    receiver.close()


def _submit(owner, **fields) -> Job:  # type: ignore[no-untyped-def]
    fields.setdefault("name", "train-bert")
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["python", "train.py"], **fields)
    return job_submit(owner=owner, spec=spec)


def _run(job: Job, gpu, *, held: timedelta = timedelta()) -> Job:  # type: ignore[no-untyped-def]
    """Start the job on `gpu`, as if it had held it for `held` already."""
    job_start(job_id=job.pk, device_ids=[gpu.pk])
    Allocation.objects.filter(job_id=job.pk, ended_at__isnull=True).update(
        started_at=F("started_at") - held
    )
    return job_mark_running(job_id=job.pk)


@pytest.mark.parametrize(
    ("end", "event", "state", "what"),
    [
        ("exit 0", "job_succeeded", "SUCCEEDED", "succeeded after 2 h 13 min."),
        ("exit 3", "job_failed", "FAILED", "failed after 2 h 13 min: Exited with code 3."),
        ("cancel", "job_cancelled", "CANCELLED", "was cancelled after 2 h 13 min: Cancelled by"),
    ],
)
def test_a_groups_job_posts_its_start_and_its_end_once_each(  # type: ignore[no-untyped-def]
    owner, gpu, hook, end, event, state, what, django_capture_on_commit_callbacks
):
    job = _submit(owner)  # notify "": the owner asked for no mail; the group hears anyway
    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu, held=timedelta(hours=2, minutes=13, seconds=5))
    with django_capture_on_commit_callbacks(execute=True):
        if end == "cancel":
            job_cancel(job_id=job.pk, by=owner)
        else:
            job_finish(job_id=job.pk, exit_code=int(end.split()[1]))

    assert hook.events(key="job") == [("job_started", job.pk), (event, job.pk)]
    started, ended = hook.received
    line = f'[gpulab] Job {job.pk} "train-bert" of alice (group vision)'
    assert started["text"] == f"{line} started. {SITE}/jobs/{job.pk}/"
    assert ended["text"].startswith(f"{line} {what}")
    assert ended["text"].endswith(f" {SITE}/jobs/{job.pk}/")
    finished = Job.objects.get(pk=job.pk)
    assert {k: ended[k] for k in ("name", "owner", "group", "state", "reason", "site")} == {
        "name": "train-bert",
        "owner": "alice",
        "group": "vision",
        "state": state,
        "reason": finished.reason,
        "site": SITE,
    }
    assert datetime.fromisoformat(ended["at"]) == finished.finished_at
    assert (started["state"], started["attempt"], ended["run_seconds"]) == ("RUNNING", 1, 7985)


def test_no_post_for_a_group_without_a_webhook_nor_for_a_job_without_a_group(  # type: ignore[no-untyped-def]
    owner, outsider, gpu, hook, django_capture_on_commit_callbacks
):
    loner = user_create(username="dave", password="pw-dave-123")
    jobs = [_submit(outsider), _submit(loner)]  # nlp has no webhook; dave has no group
    assert jobs[1].group_id is None
    for job in jobs:
        with django_capture_on_commit_callbacks(execute=True):
            _run(job, gpu)
            job_finish(job_id=job.pk, exit_code=0)
    assert hook.received == []


def test_a_transition_costs_one_query_more_for_a_job_in_a_group(  # type: ignore[no-untyped-def]
    owner, outsider, gpu, hook, django_capture_on_commit_callbacks
):
    loner = user_create(username="dave", password="pw-dave-123")
    counts = {}
    jobs = {"webhook": _submit(owner), "group": _submit(outsider), "none": _submit(loner)}
    for who, job in jobs.items():
        with (
            CaptureQueriesContext(connection) as queries,
            django_capture_on_commit_callbacks(execute=True),
        ):
            job_transition(job_id=job.pk, to_state=JobState.CANCELLED, actor=EventActor.USER)
        counts[who] = len(queries)
    # The job with its group's URL, read after commit; posting inline reads nothing more.
    assert counts["webhook"] == counts["group"] == counts["none"] + 1
    assert len(hook.received) == 1


def test_an_array_posts_once_when_its_last_task_ends(  # type: ignore[no-untyped-def]
    owner, gpu, hook, django_capture_on_commit_callbacks
):
    first = _submit(owner, name="sweep", array_size=3)
    tasks = list(Job.objects.filter(array_id=first.array_id).order_by("array_index"))

    with django_capture_on_commit_callbacks(execute=True):
        _run(tasks[0], gpu)  # no post for a task's start
        job_finish(job_id=tasks[0].pk, exit_code=0)
        job_cancel(job_id=tasks[1].pk, by=owner)
    assert hook.received == []
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=tasks[2].pk, by=owner)
    # A late report about a task already ended finds the array posted.
    from jobs.webhooks import job_webhook_request

    job_webhook_request(job_id=tasks[1].pk, state="CANCELLED")

    (body,) = hook.received
    assert body["text"] == (
        f'[gpulab] Array {first.array_id} "sweep" of alice (group vision) ended: '
        f"2 cancelled, 1 succeeded (all 3 tasks). {SITE}/jobs/{tasks[0].pk}/"
    )
    assert (body["event"], body["array"], body["job"], body["name"]) == (
        "array_ended",
        first.array_id,
        tasks[0].pk,
        "sweep",
    )
    assert (body["tally"], body["state"], body["size"]) == (
        {"CANCELLED": 2, "SUCCEEDED": 1},
        "CANCELLED",
        3,
    )


class CacheDown:
    """The cache as an outage leaves it: every call fails (config.fail_open_cache then
    answers as if nothing were cached)."""

    def __getattr__(self, name: str) -> Any:
        def down(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("cache down")

        return down


def test_a_cancelled_array_posts_once_even_while_the_cache_is_down(  # type: ignore[no-untyped-def]
    owner, gpu, hook, monkeypatch, django_capture_on_commit_callbacks
):
    first = _submit(owner, name="sweep", array_size=5)
    monkeypatch.setattr("config.fail_open_cache.cache", CacheDown())

    with django_capture_on_commit_callbacks(execute=True):
        job_array_cancel(array_id=first.array_id, by=owner)

    assert [body["event"] for body in hook.received] == ["array_ended"]
    assert hook.received[0]["tally"] == {"CANCELLED": 5}


def test_a_job_lost_while_launching_posts_its_start_when_it_first_runs(  # type: ignore[no-untyped-def]
    owner, gpu, hook, django_capture_on_commit_callbacks
):
    job = _submit(owner)
    with django_capture_on_commit_callbacks(execute=True):
        job_start(job_id=job.pk, device_ids=[gpu.pk])
        job_mark_lost(job_id=job.pk, message="launch gave up")
        job_requeue(job_id=job.pk, message="back in the queue")
    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)  # attempt 2, but its first run
        job_finish(job_id=job.pk, exit_code=0)

    assert hook.events(key="job") == [("job_started", job.pk), ("job_succeeded", job.pk)]


def test_a_retried_failure_and_its_restart_post_nothing(  # type: ignore[no-untyped-def]
    owner, gpu, hook, django_capture_on_commit_callbacks
):
    job = _submit(owner, max_retries=1)
    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)
        job_finish(job_id=job.pk, exit_code=3)  # retries left: back to PENDING
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)
    # The first start only: a second start is a retry's or a resume after a preemption.
    assert hook.events(key="job") == [("job_started", job.pk)]


def test_the_command_the_environment_and_a_sessions_secrets_are_never_posted(  # type: ignore[no-untyped-def]
    owner, gpu, hook, django_capture_on_commit_callbacks
):
    spec = JobSpec(
        image="jupyter/base-notebook",
        command=["jupyter", "lab", f"--password={SECRET}"],
        env={"API_KEY": f"env-{SECRET}"},
        interactive=True,
        name="notebook",
    )
    job = job_submit(owner=owner, spec=spec)
    with django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)
        job_cancel(job_id=job.pk, by=owner)
    session = Job.objects.get(pk=job.pk)
    assert session.session_token and session.session_port
    assert len(hook.raw) == 2
    for raw in hook.raw:
        body = raw.decode()
        assert SECRET not in body and "API_KEY" not in body and "--password" not in body
        assert session.session_token not in body
        assert str(session.session_port) not in body
    assert all("command" not in body and "env" not in body for body in hook.received)


def test_a_name_cannot_ping_the_channel_or_disguise_a_link(  # type: ignore[no-untyped-def]
    owner, gpu, hook, django_capture_on_commit_callbacks
):
    job = _submit(owner, name="<!channel> @here <https://evil.example|docs> &")
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, by=owner)
    (body,) = hook.received
    assert body["text"].startswith(
        f'[gpulab] Job {job.pk} "&lt;!channel&gt; @\u2060here '
        '&lt;https://evil.example|docs&gt; &amp;" of alice'
    )
    assert body["name"] == job.name  # the field is the name as it is


def test_a_name_cannot_make_markdown_links_or_images(  # type: ignore[no-untyped-def]
    owner, gpu, hook, django_capture_on_commit_callbacks
):
    job = _submit(owner, name="![x](https://evil.example/p.png) [see](https://evil.example)")
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, by=owner)

    (body,) = hook.received
    # Mattermost renders Markdown in a webhook's text: a word joiner breaks both forms.
    assert "](" not in body["text"] and "![" not in body["text"]
    assert (
        '"!\u2060[x]\u2060(https://evil.example/p.png) [see]\u2060(https://evil.example)"'
        in (body["text"])
    )


def test_a_receiver_that_refuses_never_fails_the_transition(  # type: ignore[no-untyped-def]
    owner, gpu, hook, caplog, django_capture_on_commit_callbacks
):
    hook.status = 500
    job = _submit(owner)
    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        _run(job, gpu)
        job_finish(job_id=job.pk, exit_code=0)
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED  # the changes stand
    assert len(hook.received) == 2  # both tried, refused, logged
    assert f"Webhook about job {job.pk} not sent: webhook answered 500" in caplog.text
    assert "SECRETPATH" not in caplog.text


def test_a_webhook_cleared_before_the_post_gets_nothing(  # type: ignore[no-untyped-def]
    owner, vision, gpu, hook, django_capture_on_commit_callbacks
):
    job = _submit(owner)
    with django_capture_on_commit_callbacks() as callbacks:
        job_cancel(job_id=job.pk, by=owner)
    LabGroup.objects.filter(pk=vision.pk).update(webhook_url="")  # between commit and send
    for callback in callbacks:
        callback()
    assert hook.received == []


def test_with_celery_the_post_is_the_shared_task_which_reads_the_url_at_each_try(  # type: ignore[no-untyped-def]
    owner,
    outsider,
    vision,
    gpu,
    hook,
    settings,
    caplog,
    celery_published,
    django_capture_on_commit_callbacks,
):
    settings.GPULAB_SCHEDULER_MODE = "celery"
    job, silent = _submit(owner), _submit(outsider)  # nlp has no webhook: no task at all
    celery_published()  # the round requests the submissions asked for
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, by=owner)
        job_cancel(job_id=silent.pk, by=outsider)

    posts = [kwargs for name, kwargs in celery_published() if name == "agents.webhook_post"]
    assert [(p["group_id"], p["payload"]["event"]) for p in posts] == [(vision.pk, "job_cancelled")]
    assert hook.received == []  # a worker posts it
    assert "SECRETPATH" not in repr(posts)  # the URL, whose path is the secret, is not queued

    assert webhook_post_task.apply(kwargs=posts[0]).get() is True
    assert hook.events(key="job") == [("job_cancelled", job.pk)]
    LabGroup.objects.filter(pk=vision.pk).update(webhook_url="")
    assert webhook_post_task.apply(kwargs=posts[0]).get() is False  # cleared: a retry gets nothing
    assert len(hook.received) == 1
    assert "dropped" not in caplog.text  # nothing to post to is no failure


def test_the_task_retries_a_refused_group_post_then_drops_it(  # type: ignore[no-untyped-def]
    vision, hook, caplog
):
    from celery.exceptions import Retry

    hook.status = 503
    kwargs = {"payload": {"event": "job_failed", "job": 42}, "group_id": vision.pk}
    with pytest.raises(Retry):
        webhook_post_task.apply(kwargs=kwargs, throw=True).get()
    last_try = webhook_post_task.apply(kwargs=kwargs, retries=webhook_post_task.max_retries)
    assert last_try.get() is False
    assert "Webhook about job 42 dropped: webhook answered 503" in caplog.text
    assert len(hook.received) == 2


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (60, "1 min"), (3599, "59 min"), (3600, "1 h"), (7985, "2 h 13 min"),
     (86400, "24 h"), (3 * 86400 + 4 * 3600 + 59, "3 d 4 h")],
)  # fmt: skip
def test_durations_read_as_a_person_says_them(seconds: int, text: str) -> None:
    # The posts say durations as the pages do (the `duration` filter).
    assert duration(seconds) == text
