"""Interactive sessions on the web pages and the API: the submit form's checkbox (and
clone), the job page's Session card (the owner's link carries the token, no one else's
page holds it), the list's badge, and `interactive`/`session` in the API."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from jobs.models import Job
from jobs.services import JobSpec, job_mark_running, job_start, job_submit
from tests.dashboard.helpers import device, logged_in
from tests.page_forms import form_values

pytestmark = pytest.mark.django_db

JUPYTER = ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"]
FORM = {
    "image": "jupyter/base-notebook",
    "command": "jupyter lab --ip=0.0.0.0 --no-browser",
    "num_gpus": "1",
    "consolidation": "preferred",
    "max_retries": "0",
}


def session(owner, **fields) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="jupyter/base-notebook", command=JUPYTER, interactive=True, **fields)
    return job_submit(owner=owner, spec=spec)


def running_session(owner, small_cluster) -> Job:  # type: ignore[no-untyped-def]
    job = session(owner)
    job_start(job_id=job.pk, device_ids=[device(small_cluster, "a0", 0).pk])
    return job_mark_running(job_id=job.pk)


def page_of(client: Client, job: Job) -> str:
    response = client.get(f"/jobs/{job.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def session_region(page: str) -> str:
    """What the page's auto-refresh swaps in for the Session card."""
    match = re.search(r'<div data-refresh-id="job-session">(.*?)</div>', page, re.DOTALL)
    assert match, "no refreshable Session region"
    return match[1]


# --------------------------------------------------------------------------- submit form


def test_the_checkbox_submits_a_session_with_the_default_walltime(owner, small_cluster):
    response = logged_in(owner).post("/jobs/submit/", {**FORM, "interactive": "on"})

    assert response.status_code == 302
    job = Job.objects.get()
    assert job.interactive and job.walltime_seconds == 4 * 3600
    assert job.session_token


def test_without_the_checkbox_the_job_is_a_batch_job(owner, small_cluster):
    assert logged_in(owner).post("/jobs/submit/", FORM).status_code == 302
    job = Job.objects.get()
    assert not job.interactive and job.walltime_seconds is None


def test_the_checkbox_help_gives_the_labs_session_limits(owner, settings):
    settings.GPULAB_SESSION_DEFAULT_HOURS, settings.GPULAB_SESSION_MAX_HOURS = 3, 6

    form = logged_in(owner).get("/jobs/submit/").context["form"]

    help_text = form.fields["interactive"].help_text
    assert "not preempted (except to give another group back" in help_text
    assert "walltime 3 h when none is given, at most 6 h" in help_text
    assert "jupyter lab --ip=0.0.0.0 --no-browser" in help_text


def test_a_session_walltime_over_the_maximum_is_refused_on_the_walltime_field(owner, small_cluster):
    data = {**FORM, "interactive": "on", "walltime_minutes": str(12 * 60 + 1)}

    response = logged_in(owner).post("/jobs/submit/", data)

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["walltime_minutes"]
    assert "A session runs at most 12 h" in errors["walltime_minutes"][0]
    assert not Job.objects.exists()


def test_clone_keeps_the_session_checkbox_and_resubmits_a_session(owner, small_cluster):
    original = session(owner)
    client = logged_in(owner)

    values = form_values(client.get("/jobs/submit/", {"clone": original.pk}).content.decode())
    assert values.get("interactive") == "on"
    assert client.post("/jobs/submit/", values).status_code == 302

    clone = Job.objects.exclude(pk=original.pk).get()
    assert clone.interactive and clone.walltime_seconds == original.walltime_seconds
    assert clone.session_token and clone.session_token != original.session_token


# --------------------------------------------------------------------------- job page


def test_the_owner_gets_the_link_with_the_token(owner, small_cluster):
    job = running_session(owner, small_cluster)

    response = logged_in(owner).get(f"/jobs/{job.pk}/")

    region = session_region(response.content.decode())
    url = f"http://127.0.0.1:{job.session_port}/"
    assert f'<a href="{url}?token={job.session_token}"' in region
    assert "<dd>a0</dd>" in region
    assert "JUPYTER_TOKEN" in region and "GPULAB_SESSION_TOKEN" in region
    assert "ssh -N -L" not in region  # no gateway: the node's own address
    # A page with a secret on it stays out of caches.
    assert "no-store" in response.headers["Cache-Control"]


@pytest.mark.parametrize("viewer", ["teammate", "outsider"])
def test_another_student_gets_404_for_a_session(owner, small_cluster, viewer, request):
    job = running_session(owner, small_cluster)

    response = logged_in(request.getfixturevalue(viewer)).get(f"/jobs/{job.pk}/")

    assert response.status_code == 404
    assert job.session_token not in response.content.decode()


def test_an_admin_sees_the_address_but_never_the_token(owner, lab_admin, small_cluster):
    job = running_session(owner, small_cluster)

    page = page_of(logged_in(lab_admin), job)

    region = session_region(page)
    assert f'<a href="http://127.0.0.1:{job.session_port}/"' in region
    assert "only the job's owner sees the token" in region
    assert job.session_token not in page
    assert "token=" not in page


def test_the_tunnel_is_shown_when_the_lab_has_a_gateway(owner, small_cluster, settings):
    settings.GPULAB_SESSION_GATEWAY = "login.lab.example"
    job = running_session(owner, small_cluster)
    port = job.session_port

    region = session_region(page_of(logged_in(owner), job))

    assert f"<code>ssh -N -L {port}:127.0.0.1:{port} login.lab.example</code>" in region
    assert f'<a href="http://localhost:{port}/?token={job.session_token}"' in region


def test_before_it_starts_the_card_says_the_address_comes_and_refreshes_in(owner, small_cluster):
    job = session(owner)
    client = logged_in(owner)

    pending = page_of(client, job)

    assert "The address appears here once the session runs." in session_region(pending)
    assert job.session_token not in pending
    # The region the page refreshes in place is the one that gets the address.
    job_start(job_id=job.pk, device_ids=[device(small_cluster, "a0", 0).pk])
    job.refresh_from_db()
    assert f"?token={job.session_token}" in session_region(page_of(client, job))


def test_a_batch_job_has_no_session_card(owner, small_cluster):
    job = job_submit(owner=owner, spec=JobSpec(image="x/y", command=["true"]))

    page = page_of(logged_in(owner), job)

    assert 'data-refresh-id="job-session"' not in page and "Session</h2>" not in page


def test_the_list_marks_sessions_with_a_badge(owner, small_cluster):
    session(owner, name="notebook")
    job_submit(owner=owner, spec=JobSpec(image="x/y", command=["true"], name="batch"))

    page = logged_in(owner).get("/jobs/").content.decode()

    rows = {
        name: row for row in page.split("<tr>") for name in ("notebook", "batch") if name in row
    }
    assert 'class="badge-session"' in rows["notebook"]
    assert "badge-session" not in rows["batch"]
    assert page.count('class="badge-session"') == 1


# --------------------------------------------------------------------------- API


def test_the_api_takes_interactive_and_gives_the_session_to_its_owner_only(
    owner, lab_admin, small_cluster, api_as
):
    body = {"image": "jupyter/base-notebook", "command": JUPYTER, "interactive": True}
    created = api_as(owner).post("/api/v1/jobs/", body, format="json")

    assert created.status_code == 201, created.content
    assert created.json()["interactive"] is True and created.json()["session"] is None
    job = Job.objects.get()
    assert job.interactive
    job_start(job_id=job.pk, device_ids=[device(small_cluster, "a0", 0).pk])
    job.refresh_from_db()

    expected = {
        "node": "a0",
        "port": job.session_port,
        "url": f"http://127.0.0.1:{job.session_port}/",
        "tunnel": "",
    }
    for viewer, token in ((owner, job.session_token), (lab_admin, None)):
        client = api_as(viewer)
        shown = client.get(f"/api/v1/jobs/{job.pk}/").json()["session"]
        listed = client.get("/api/v1/jobs/").json()["results"][0]
        assert shown == {**expected, "token": token}
        assert listed["interactive"] is True and listed["session"] == shown


def test_the_api_says_a_batch_job_is_not_interactive(owner, small_cluster, api_as):
    body = {"image": "x/y", "command": ["true"]}
    created = api_as(owner).post("/api/v1/jobs/", body, format="json")

    assert created.status_code == 201
    assert created.json()["interactive"] is False and created.json()["session"] is None
