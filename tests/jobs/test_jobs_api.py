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
