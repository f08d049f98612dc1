"""The HTML pages: login, submit form, my jobs, detail, cancel; and who may open what."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory

FORM = {
    "image": "pytorch/pytorch:2.4.0",
    "command": "python train.py --name 'my run'",
    "num_gpus": "2",
    "accepted_types": "a100, v100",
    "consolidation": "preferred",
    "max_retries": "0",
    "env": "SEED=1\nMODE=fast",
}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_the_login_page_logs_a_student_in(owner):
    client = Client()
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "alice", "password": "pw-alice-123"})
    assert response.status_code == 302
    assert client.get("/jobs/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/jobs/", "/jobs/submit/", "/jobs/1/", "/account/tokens/"])
def test_pages_send_anonymous_visitors_to_login(path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response.url.startswith("/login/")


@pytest.mark.django_db
def test_the_form_submits_a_job_with_argv_split_like_a_shell(owner, small_cluster):
    client = logged_in(owner)
    response = client.post("/jobs/submit/", FORM)
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.command == ["python", "train.py", "--name", "my run"]
    assert job.env == {"SEED": "1", "MODE": "fast"}
    assert job.accepted_types == ["a100", "v100"]
    page = client.get("/jobs/").content.decode()
    assert f"/jobs/{job.pk}/" in page and "Pending" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"image": "Bad Image"}, "is not an image reference"),
        ({"command": "python 'unclosed"}, "Cannot split the command"),
        ({"accepted_types": "h100"}, "Unknown device type(s): h100"),
        ({"num_gpus": "99"}, "can never be granted"),
        ({"env": "lower=1"}, "is not a variable name"),
        ({"env": "NOEQUALS"}, "is not NAME=value"),
    ],
)
def test_a_bad_form_shows_the_error_beside_the_field_and_writes_nothing(
    owner, small_cluster, changes, fragment
):
    response = logged_in(owner).post("/jobs/submit/", {**FORM, **changes})
    assert response.status_code == 400  # refused, as the API says it, with the form again
    assert fragment in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_my_jobs_lists_only_my_jobs_for_a_student(owner, outsider):
    mine, theirs = (
        JobFactory(owner=owner, name="mine-job"),
        JobFactory(owner=outsider, name="their-job"),
    )
    page = logged_in(owner).get("/jobs/").content.decode()
    assert "mine-job" in page and "their-job" not in page
    assert f"/jobs/{theirs.pk}/" not in page and f"/jobs/{mine.pk}/" in page


@pytest.mark.django_db
def test_an_admin_lists_everyones_jobs(owner, outsider, lab_admin):
    JobFactory(owner=owner, name="mine-job")
    JobFactory(owner=outsider, name="their-job")
    page = logged_in(lab_admin).get("/jobs/").content.decode()
    assert "mine-job" in page and "their-job" in page


@pytest.mark.django_db
def test_the_detail_page_shows_the_history(owner, small_cluster):
    client = logged_in(owner)
    client.post("/jobs/submit/", FORM)
    job = Job.objects.get()
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "History" in page and "Submitted: 2 GPU(s)" in page and "Cancel job" in page


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["teammate", "outsider"])
def test_another_student_gets_404_for_detail_and_cancel(persona, owner, request):
    job = JobFactory(owner=owner)
    client = logged_in(request.getfixturevalue(persona))
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    job.refresh_from_db()
    assert job.state == JobState.PENDING


@pytest.mark.django_db
def test_the_owner_and_an_admin_can_cancel_from_the_page(owner, lab_admin):
    first, second = JobFactory(owner=owner), JobFactory(owner=owner)
    assert logged_in(owner).post(f"/jobs/{first.pk}/cancel/").status_code == 302
    assert logged_in(lab_admin).post(f"/jobs/{second.pk}/cancel/").status_code == 302
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.CANCELLED}


@pytest.mark.django_db
def test_cancel_only_cancels_on_post(owner):
    # A GET (the login redirect of a cancel sent after the session ended) shows the job.
    job = JobFactory(owner=owner)
    response = logged_in(owner).get(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert logged_in(owner).put(f"/jobs/{job.pk}/cancel/").status_code == 405


@pytest.mark.django_db
def test_a_student_cannot_open_the_django_admin(owner, lab_admin):
    assert logged_in(owner).get("/admin/").status_code == 302  # to the admin login
    assert logged_in(lab_admin).get("/admin/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/admin/jobs/job/",
        "/admin/jobs/allocation/",
        "/admin/jobs/jobevent/",
        "/admin/cluster/node/",
        "/admin/cluster/device/",
        "/admin/cluster/devicetype/",
        "/admin/accounts/user/",
        "/admin/accounts/labgroup/",
        "/admin/accounts/apitoken/",
        "/admin/scheduler/schedulerconfig/",
        "/admin/scheduler/schedulinground/",
    ],
)
def test_every_model_has_a_working_admin_page(lab_admin, owner, path):
    JobFactory(owner=owner)
    assert logged_in(lab_admin).get(path).status_code == 200


@pytest.mark.django_db
def test_my_jobs_refreshes_its_table_every_15_seconds(owner):
    JobFactory(owner=owner)
    page = logged_in(owner).get("/jobs/").content.decode()
    assert 'data-refresh-seconds="15"' in page
    assert 'data-refresh-id="job-table"' in page and 'data-refresh-id="job-filters"' in page


@pytest.mark.django_db
def test_my_jobs_shows_the_queue_position_and_the_reason(owner):
    JobFactory(owner=owner, queue_position=3, reason="Waiting for 2 a100 GPUs.")
    page = logged_in(owner).get("/jobs/").content.decode()
    assert "#3 · Waiting for 2 a100 GPUs." in page


@pytest.mark.django_db
def test_the_pager_and_the_state_filters_keep_the_other_filters(owner, lab_admin):
    JobFactory.create_batch(51, owner=owner, state=JobState.PENDING)
    client = logged_in(lab_admin)
    first = client.get("/jobs/", {"state": "PENDING", "owner": "alice"}).content.decode()
    assert "?page=2&amp;state=PENDING&amp;owner=alice" in first
    assert "?state=RUNNING&amp;owner=alice" in first
    second = client.get("/jobs/", {"state": "PENDING", "owner": "alice", "page": 2})
    assert len(second.context["rows"]) == 1
    assert "?page=1&amp;state=PENDING&amp;owner=alice" in second.content.decode()


@pytest.mark.django_db
def test_my_jobs_needs_a_bounded_number_of_queries(owner, outsider, django_assert_max_num_queries):
    winner = JobFactory(owner=outsider)
    JobFactory.create_batch(
        50, owner=owner, state=JobState.PENDING, reason=f"Preempted for job #{winner.pk}: x"
    )
    client = logged_in(owner)
    # session, user, the groups the user coordinates, state counts, page count, page rows,
    # the jobs the reasons mention
    with django_assert_max_num_queries(7):
        page = client.get("/jobs/").content.decode()
    assert page.count("Preempted for another job: x") == 50


@pytest.mark.django_db
def test_the_job_admin_cancels_through_the_state_machine_and_deletes_only_ended_jobs(
    owner, lab_admin
):
    running = JobFactory(owner=owner, state=JobState.RUNNING)
    ended = JobFactory(owner=owner, state=JobState.SUCCEEDED)
    admin = logged_in(lab_admin)
    url = "/admin/jobs/job/"

    assert admin.get(f"{url}add/").status_code == 403
    page = admin.get(f"{url}{running.pk}/change/").content.decode()
    assert 'name="env"' not in page and 'name="num_gpus"' not in page
    assert admin.get(f"{url}{running.pk}/delete/").status_code == 403
    for selected, left in (([running.pk, ended.pk], 2), ([ended.pk], 1)):  # a mix: refused
        admin.post(url, {"action": "delete_selected", "_selected_action": selected, "post": "yes"})
        assert Job.objects.count() == left
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]

    admin.post(url, {"action": "cancel", "_selected_action": [running.pk]})

    running.refresh_from_db()
    assert running.state == JobState.CANCELLED
    assert running.events.last().message == f"Cancelled by an admin ({lab_admin.username})."
