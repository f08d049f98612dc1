"""The jobs REST API: submit, list, detail, cancel; token and session auth; cross-user rules."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory

SUBMIT = {"image": "pytorch/pytorch:2.4.0", "command": ["python", "train.py"], "num_gpus": 2}


@pytest.mark.django_db
def test_a_student_submits_with_a_token_and_sees_it_pending(owner, small_cluster, api_as):
    client = api_as(owner)
    response = client.post("/api/v1/jobs/", SUBMIT, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["state"], body["owner"], body["group"]) == ("PENDING", "alice", "vision")
    assert body["events"][0]["to_state"] == "PENDING"
    listing = client.get("/api/v1/jobs/").json()
    assert [job["id"] for job in listing["results"]] == [body["id"]]


@pytest.mark.django_db
def test_a_student_submits_with_a_browser_session(owner, small_cluster):
    client = APIClient(enforce_csrf_checks=False)
    client.force_login(owner)
    assert client.post("/api/v1/jobs/", SUBMIT, format="json").status_code == 201


@pytest.mark.django_db
def test_a_bad_submission_is_a_400_that_names_the_fields_and_writes_nothing(
    owner, small_cluster, api_as
):
    bad = {
        "image": "Not An Image",
        "command": "python train.py",
        "num_gpus": 99,
        "env": {"x-y": "1"},
    }
    response = api_as(owner).post("/api/v1/jobs/", bad, format="json")
    assert response.status_code == 400
    assert {"image", "command", "env", "num_gpus"} <= set(response.json())
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_an_unknown_field_is_refused_not_ignored(owner, small_cluster, api_as):
    response = api_as(owner).post("/api/v1/jobs/", {**SUBMIT, "gpus": 4}, format="json")
    assert response.status_code == 400
    assert response.json() == {"gpus": ["Unknown field."]}


@pytest.mark.django_db
def test_malformed_json_is_a_400(owner, small_cluster, api_as):
    response = api_as(owner).post("/api/v1/jobs/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


@pytest.mark.django_db
def test_a_missing_required_field_is_named(owner, small_cluster, api_as):
    response = api_as(owner).post("/api/v1/jobs/", {"command": ["x"]}, format="json")
    assert response.status_code == 400
    assert "image" in response.json()


@pytest.mark.django_db
def test_the_pending_quota_is_a_clear_400(owner, small_cluster, api_as):
    owner.max_pending_jobs = 0
    owner.save()
    response = api_as(owner).post("/api/v1/jobs/", SUBMIT, format="json")
    assert response.status_code == 400
    assert "QuotaExceeded" in response.json()["quota"][0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/jobs/"),
        ("post", "/api/v1/jobs/"),
        ("get", "/api/v1/jobs/1/"),
        ("post", "/api/v1/jobs/1/cancel/"),
    ],
)
def test_anonymous_clients_are_refused(method, path):
    assert getattr(APIClient(), method)(path).status_code == 401


@pytest.mark.django_db
def test_a_wrong_or_revoked_token_is_refused(owner, api_as):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token gpl_not-a-real-token")
    assert client.get("/api/v1/jobs/").status_code == 401
    client = api_as(owner)
    owner.api_tokens.update(revoked_at="2026-01-01T00:00:00Z")
    assert client.get("/api/v1/jobs/").status_code == 401


@pytest.mark.django_db
def test_bearer_is_accepted_as_well_as_token(owner, api_as):
    from accounts.services import api_token_create

    _, key = api_token_create(user=owner, name="bearer")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/jobs/").status_code == 200


# ---------------------------------------------------------------- who sees and touches what


@pytest.mark.django_db
def test_students_list_only_their_own_jobs(owner, teammate, outsider, vision, api_as):
    mine = JobFactory(owner=owner, group=vision)
    JobFactory(owner=teammate, group=vision)
    JobFactory(owner=outsider)
    ids = [job["id"] for job in api_as(owner).get("/api/v1/jobs/").json()["results"]]
    assert ids == [mine.pk]
    # Asking for someone else's jobs by filter reveals nothing either: by owner, or by a
    # group shared with a teammate.
    assert api_as(owner).get("/api/v1/jobs/?owner=carol").json()["results"] == []
    by_group = api_as(owner).get("/api/v1/jobs/?group=vision").json()["results"]
    assert [job["id"] for job in by_group] == [mine.pk]


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["teammate", "outsider"])
def test_another_student_can_neither_see_nor_cancel_a_job(persona, owner, request, api_as):
    job = JobFactory(owner=owner)
    other = api_as(request.getfixturevalue(persona))
    assert other.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert other.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404
    job.refresh_from_db()
    assert job.state == JobState.PENDING


@pytest.mark.django_db
def test_an_admin_sees_filters_and_cancels_anyones_jobs(owner, outsider, lab_admin, api_as):
    job = JobFactory(owner=owner)
    JobFactory(owner=outsider, state=JobState.RUNNING)
    admin = api_as(lab_admin)
    assert admin.get("/api/v1/jobs/").json()["count"] == 2
    assert [j["id"] for j in admin.get("/api/v1/jobs/?owner=alice").json()["results"]] == [job.pk]
    assert admin.get("/api/v1/jobs/?state=RUNNING").json()["count"] == 1
    assert admin.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    response = admin.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["events"][-1]["actor_user"] == "root"


@pytest.mark.django_db
def test_filter_by_group(owner, outsider, lab_admin, api_as):
    JobFactory(owner=owner, group=owner.default_group)
    JobFactory(owner=outsider, group=outsider.default_group)
    assert api_as(lab_admin).get("/api/v1/jobs/?group=nlp").json()["count"] == 1


@pytest.mark.django_db
def test_an_unknown_state_filter_is_a_400_naming_the_field(owner, api_as):
    response = api_as(owner).get("/api/v1/jobs/?state=SLEEPING")
    assert response.status_code == 400
    assert "state" in response.json()


@pytest.mark.django_db
def test_the_owner_cancels_and_a_second_cancel_is_a_409(owner, api_as):
    job = JobFactory(owner=owner)
    client = api_as(owner)
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").json()["state"] == "CANCELLED"
    again = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 409
    assert "already ended" in again.json()["detail"]


@pytest.mark.django_db
def test_the_openapi_schema_documents_the_job_endpoints(client):
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {"/api/v1/jobs/", "/api/v1/jobs/{job_id}/", "/api/v1/jobs/{job_id}/cancel/"} <= set(
        paths
    )
    assert client.get("/api/docs/").status_code == 200


# ---------------------------------------------------------------- routes without the slash


@pytest.mark.django_db
def test_a_post_without_the_trailing_slash_submits_rather_than_redirecting(
    owner, small_cluster, api_as
):
    # A 301 is followed as a GET by curl -L and requests: a job list, nothing submitted.
    response = api_as(owner).post("/api/v1/jobs", SUBMIT, format="json")
    assert response.status_code == 201, response.content
    assert Job.objects.get().pk == response.json()["id"]


@pytest.mark.django_db
def test_cancel_and_detail_answer_without_the_trailing_slash(owner, api_as):
    job = JobFactory(owner=owner)
    client = api_as(owner)
    assert client.get(f"/api/v1/jobs/{job.pk}").json()["id"] == job.pk
    response = client.post(f"/api/v1/jobs/{job.pk}/cancel")
    assert response.status_code == 200, response.content
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    ["/api/v1/queue", "/api/v1/cluster", "/api/v1/utilization", "/api/v1/fairness"],
)
def test_every_api_route_answers_without_the_trailing_slash(owner, api_as, path):
    assert api_as(owner).get(path).status_code == 200


# ---------------------------------------------------------------- list: pages and parameters


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["0", "-1", "abc", "1.5", "", "9" * 5000])
def test_a_bad_page_of_the_job_list_is_a_400_naming_it(owner, api_as, page):
    JobFactory(owner=owner)
    response = api_as(owner).get(f"/api/v1/jobs/?page={page}")
    assert response.status_code == 400
    assert response.json() == {"page": ["A page number, 1 or more."]}


@pytest.mark.django_db
def test_a_page_past_the_last_is_a_400_saying_how_many_there_are(owner, api_as):
    JobFactory(owner=owner)
    response = api_as(owner).get("/api/v1/jobs/?page=99")
    assert response.status_code == 400
    assert response.json() == {"page": ["There is 1 page."]}


@pytest.mark.django_db
def test_an_empty_list_answers_any_page_with_its_one_empty_page(owner, api_as):
    # As /api/v1/queue/ does: an empty list has one (empty) page.
    body = api_as(owner).get("/api/v1/jobs/?page=3").json()
    assert (body["count"], body["results"]) == (0, [])


@pytest.mark.django_db
@pytest.mark.parametrize("parameter", ["sate", "status", "page_size", "ordering"])
def test_an_unknown_query_parameter_is_a_400_naming_it(owner, api_as, parameter):
    JobFactory(owner=owner)
    response = api_as(owner).get(f"/api/v1/jobs/?{parameter}=PENDING")
    assert response.status_code == 400
    assert list(response.json()) == [parameter]
    assert "Unknown query parameter" in response.json()[parameter][0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query", ["state=PENDING&state=RUNNING", "state=PENDING,RUNNING", "state=PENDING, RUNNING"]
)
def test_the_state_filter_takes_several_states_repeated_or_comma_separated(owner, api_as, query):
    pending = JobFactory(owner=owner)
    running = JobFactory(owner=owner, state=JobState.RUNNING)
    JobFactory(owner=owner, state=JobState.CANCELLED)
    ids = {job["id"] for job in api_as(owner).get(f"/api/v1/jobs/?{query}").json()["results"]}
    assert ids == {pending.pk, running.pk}


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["state=PENDING&state=bogus", "state=bogus,PENDING"])
def test_every_state_of_the_filter_is_checked(owner, api_as, query):
    response = api_as(owner).get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    assert response.json()["state"] == [
        "Unknown state 'bogus'; choose from: " + ", ".join(JobState.values) + "."
    ]


# ---------------------------------------------------------------- strict types


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"), [("image", 5), ("name", 5), ("name", True), ("group", 3), ("image", [])]
)
def test_a_non_string_in_a_text_field_is_refused_not_converted(
    owner, small_cluster, api_as, field, value
):
    response = api_as(owner).post("/api/v1/jobs/", {**SUBMIT, field: value}, format="json")
    assert response.status_code == 400
    assert response.json() == {field: ["Not a valid string."]}
    assert not Job.objects.exists()


# ---------------------------------------------------------------- live accounting


@pytest.mark.django_db
def test_a_running_job_shows_the_service_of_its_current_run(owner, small_cluster, api_as):
    from tests.dashboard.helpers import device, hold

    # Held 2 × a100 (speed 2) for 30 minutes, after 1 GPU·h stored from an earlier run.
    devices = [device(small_cluster, "a0", 0), device(small_cluster, "a0", 1)]
    job = hold(owner, devices)
    Job.objects.filter(pk=job.pk).update(attained_service=3600.0)
    client = api_as(owner)
    detail = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["attained_gpu_hours"] == pytest.approx(1.0 + 2 * 2.0 * 0.5, abs=0.01)
    listed = client.get("/api/v1/jobs/").json()["results"][0]
    assert listed["attained_gpu_hours"] == pytest.approx(3.0, abs=0.01)
