"""Every error under /api/ is JSON in one of two shapes: `{"<field>": [...]}` for rejected
input, `{"detail", "code"}` for the rest, also where Django answers outside DRF."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from jobs.models import Job

SUBMIT = {"image": "pytorch/pytorch:2.4.0", "command": ["python", "train.py"], "num_gpus": 1}


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == code
    assert body["detail"]
    return body


@pytest.mark.django_db
def test_an_anonymous_client_gets_a_code():
    assert_error(APIClient().get("/api/v1/jobs/"), 401, "not_authenticated")


@pytest.mark.django_db
def test_a_wrong_token_gets_a_code():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token gpl_not-a-real-token")
    assert_error(client.get("/api/v1/jobs/"), 401, "authentication_failed")


@pytest.mark.django_db
def test_a_method_the_endpoint_lacks_gets_a_code(owner, api_as):
    assert_error(api_as(owner).delete("/api/v1/jobs/"), 405, "method_not_allowed")


@pytest.mark.django_db
def test_an_unsupported_media_type_gets_a_code(owner, api_as):
    response = api_as(owner).post("/api/v1/jobs/", "<a/>", content_type="application/xml")
    assert_error(response, 415, "unsupported_media_type")


@pytest.mark.django_db
def test_malformed_json_gets_a_code(owner, api_as):
    response = api_as(owner).post("/api/v1/jobs/", "{not json", content_type="application/json")
    assert_error(response, 400, "parse_error")


@pytest.mark.django_db
def test_too_many_submissions_get_a_code(owner, small_cluster, api_as, monkeypatch):
    from rest_framework.throttling import ScopedRateThrottle

    # The throttle counts per user in the cache, under this run's key prefix: a new user
    # starts with no history.
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"job_submit": "1/min"})
    client = api_as(owner)
    assert client.post("/api/v1/jobs/", SUBMIT, format="json").status_code == 201
    assert_error(client.post("/api/v1/jobs/", SUBMIT, format="json"), 429, "throttled")


@pytest.mark.django_db
def test_a_permission_denied_keeps_the_views_reason(owner, api_as):
    body = assert_error(api_as(owner).get("/api/v1/usage/"), 403, "permission_denied")
    assert body["detail"] == "The usage report is for lab admins and group coordinators."


@pytest.mark.django_db
def test_a_validation_error_keeps_its_field_shape(owner, small_cluster, api_as):
    response = api_as(owner).post("/api/v1/jobs/", {**SUBMIT, "gpus": 2}, format="json")
    assert response.status_code == 400
    assert response.json() == {"gpus": ["Unknown field."]}


@pytest.mark.django_db
def test_a_body_field_named_detail_keeps_the_field_shape_without_a_code(
    owner, small_cluster, api_as
):
    # `{"detail": [...]}` is a rejected field, not DRF's `{"detail": "..."}`: no `code`.
    response = api_as(owner).post("/api/v1/jobs/", {**SUBMIT, "detail": "x"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"detail": ["Unknown field."]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "known"),
    [
        ("/api/v1/queue/", "page"),
        ("/api/v1/cluster/", None),
        ("/api/v1/utilization/", "window"),
        ("/api/v1/fairness/", "window"),
        ("/api/v1/usage/", "end, start"),
    ],
)
def test_an_unknown_query_parameter_is_named_on_every_list_endpoint(lab_admin, api_as, path, known):
    response = api_as(lab_admin).get(f"{path}?windw=7d")
    assert response.status_code == 400
    hint = f"Known: {known}." if known else "This endpoint takes none."
    assert response.json() == {"windw": [f"Unknown query parameter. {hint}"]}
    assert api_as(lab_admin).get(f"{path}?format=json").status_code == 200


@pytest.mark.django_db
def test_an_unknown_query_parameter_is_named_on_detail_cancel_and_logs(
    owner, small_cluster, api_as
):
    client = api_as(owner)
    job = client.post("/api/v1/jobs/", SUBMIT, format="json").json()["id"]
    none = {"bogus": ["Unknown query parameter. This endpoint takes none."]}
    assert client.get(f"/api/v1/jobs/{job}/?bogus=1").json() == none
    assert client.post(f"/api/v1/jobs/{job}/cancel/?bogus=1").json() == none
    assert Job.objects.get(pk=job).state == "PENDING"  # refused before anything was done
    assert client.post("/api/v1/jobs/?bogus=1", SUBMIT, format="json").json() == none
    logs = client.get(f"/api/v1/agents/jobs/{job}/logs/?steam=stderr")
    assert logs.status_code == 400
    assert logs.json() == {"steam": ["Unknown query parameter. Known: stream."]}
    # `stream` itself passes the check: the job has not started, so there is no log yet.
    assert client.get(f"/api/v1/agents/jobs/{job}/logs/?stream=stderr").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "query", "name"),
    [
        ("/api/v1/jobs/", "page=abc&page=1", "page"),
        ("/api/v1/jobs/", "owner=alice&owner=bob", "owner"),
        ("/api/v1/queue/", "page=abc&page=1", "page"),
        ("/api/v1/utilization/", "window=1y&window=7d", "window"),
        ("/api/v1/fairness/", "window=7d&window=24h", "window"),
        ("/api/v1/usage/", "start=2026-01-01&start=2026-01-02", "start"),
        ("/api/v1/jobs/1/", "format=json&format=json", "format"),
    ],
)
def test_a_single_value_parameter_given_twice_is_a_400_naming_it(
    lab_admin, api_as, path, query, name
):
    # Django's `get` answers with the last value: `page=abc&page=1` was silently page 1.
    response = api_as(lab_admin).get(f"{path}?{query}")
    assert response.status_code == 400
    assert response.json() == {name: ["Given more than once; it takes one value."]}


@pytest.mark.django_db
def test_state_stays_repeatable(owner, api_as):
    response = api_as(owner).get("/api/v1/jobs/?state=PENDING&state=RUNNING")
    assert response.status_code == 200


# ---------------------------------------------------------------- answered outside DRF


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/jobz/", "/api/v1/jobs/abc/", "/api/v2/", "/api/"])
def test_an_unmatched_api_url_is_a_json_404(owner, api_as, path):
    body = assert_error(api_as(owner).get(path), 404, "not_found")
    assert body == {"detail": "Not found.", "code": "not_found"}


@pytest.mark.django_db
def test_an_unmatched_page_url_outside_the_api_stays_html(owner):
    from django.test import Client

    client = Client()
    client.force_login(owner)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_the_upload_limit_is_a_json_413_naming_it(
    owner, small_cluster, api_as, settings, content_type
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    name = "x" * 2000
    body = json.dumps({**SUBMIT, "name": name}) if "json" in content_type else f"name={name}"
    response = api_as(owner).post("/api/v1/jobs/", body, content_type=content_type)
    detail = assert_error(response, 413, "request_too_large")
    assert detail["limit_bytes"] == 1000
    assert "at most 1000" in detail["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_an_unhandled_exception_is_a_json_500_without_a_traceback(
    owner, api_as, monkeypatch, settings
):
    def broken(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("jobs.selectors.job_list", broken)
    settings.DEBUG = True  # not even a developer's traceback page in the API
    client = api_as(owner)
    client.raise_request_exception = False
    response = client.get("/api/v1/jobs/")
    body = assert_error(response, 500, "server_error")
    assert body == {"detail": "Server error.", "code": "server_error"}
    assert b"secret internals" not in response.content
