"""What the job pages show and answer: the command as typed, the exact walltime, a cancel
reached by GET (the login redirect after an expired session), the log as a whole page
without JavaScript, and the auto-refresh note only where a script refreshes."""

from __future__ import annotations

import html
import re
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Allocation, Job
from tests.factories import JobFactory


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def shown_command(page: str) -> str:
    return html.unescape(re.findall(r"<dt>Command</dt><dd><code>(.*?)</code>", page, re.S)[0])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["python", "train.py", "--name", "my run"], "python train.py --name 'my run'"),
        (["echo", "", "x"], "echo '' x"),
        (["sh", "-c", "echo a; echo b"], "sh -c 'echo a; echo b'"),
    ],
)
def test_the_detail_page_shows_the_command_quoted_as_typed(owner, argv, shown):
    job = JobFactory(owner=owner, command=argv)
    assert shown_command(logged_in(owner).get(f"/jobs/{job.pk}/").content.decode()) == shown


@pytest.mark.django_db
@pytest.mark.parametrize(("seconds", "shown"), [(150, "2 min 30 s"), (3600, "60 min")])
def test_the_detail_page_shows_the_walltime_exactly(owner, seconds, shown):
    job = JobFactory(owner=owner, walltime_seconds=seconds)
    page = logged_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert f"<dt>Walltime</dt><dd>{shown} · " in page


# --------------------------------------------------------------------------- cancel by GET


@pytest.mark.django_db
def test_a_cancel_sent_after_the_session_ended_lands_on_the_job_and_cancels_nothing(teammate):
    job = JobFactory(owner=teammate)
    client = Client()  # the session has expired
    to_login = client.post(f"/jobs/{job.pk}/cancel/")
    assert to_login.status_code == 302 and to_login.url.startswith("/login/")
    logged = client.post(
        to_login.url, {"username": "bob", "password": "pw-bob-123"}
    )  # the login form sends the browser on to ?next=, with a GET
    assert logged.status_code == 302 and logged.url == f"/jobs/{job.pk}/cancel/"
    landed = client.get(logged.url, follow=True)
    assert landed.status_code == 200
    assert landed.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert "was not cancelled" in landed.content.decode()
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING


@pytest.mark.django_db
def test_a_get_on_another_students_cancel_url_is_a_404(owner, outsider):
    job = JobFactory(owner=outsider)
    assert logged_in(owner).get(f"/jobs/{job.pk}/cancel/").status_code == 404


# --------------------------------------------------------------------------- log without JS


def running_job(owner, device) -> Job:  # type: ignore[no-untyped-def]
    now = timezone.now()
    job = JobFactory(owner=owner, state=JobState.RUNNING, attempt=1, started_at=now)
    Allocation.objects.create(job=job, attempt=1, device=device, started_at=now)
    return job


@pytest.mark.django_db
def test_the_log_link_without_javascript_opens_a_whole_page(owner, small_cluster):
    job = running_job(owner, small_cluster[0])
    client = logged_in(owner)
    with mock.patch("agents.logs.agent_logs_tail", return_value="epoch 1\n"):
        page = client.get(f"/jobs/{job.pk}/logs/?stream=stderr")
        fragment = client.get(f"/jobs/{job.pk}/logs/?stream=stderr", HTTP_X_REFRESH="1")
    body = page.content.decode()
    assert f"<title>Log of job #{job.pk} · gpulab</title>" in body
    assert '<nav aria-label="Main">' in body and f'href="/jobs/{job.pk}/"' in body
    assert "epoch 1" in body
    # What job_detail.js loads stays the bare region.
    assert fragment.content.decode().lstrip().startswith('<div class="log-view"')
    assert "X-Refresh" in page["Vary"]


@pytest.mark.django_db
def test_the_refresh_note_is_left_to_the_script(owner):
    # Without JavaScript nothing refreshes: the page must not say it does.
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    page = logged_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "data-refresh-seconds" in page
    assert "Refreshes every" not in page
