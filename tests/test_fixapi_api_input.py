"""The API reads JSON bodies only (a form post went past every JSON guard: a 500 on deep
nesting or a lone surrogate, a variable named twice silently kept last), refuses an
unknown `?format=` naming it, and its schema states the submission's limits."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import jsonschema
import pytest
from django.test import Client
from rest_framework.test import APIClient

from jobs.models import Job

SUBMIT = "/api/v1/jobs/"
FORM_BODIES = [
    {"image": "pytorch/pytorch:2.4.0", "command": '["python", "x"]'},
    {"image": "pytorch/pytorch:2.4.0", "command": "[" * 100_000},
    {"image": "pytorch/pytorch:2.4.0", "command": '["python"]', "accepted_types": '["\\ud800"]'},
    {"image": "pytorch/pytorch:2.4.0", "command": '["python"]', "env": '{"A": "1", "A": "2"}'},
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", FORM_BODIES, ids=["plain", "deep", "surrogate", "twice"])
def test_a_form_encoded_submission_is_a_415_and_writes_nothing(owner, small_cluster, api_as, body):
    client = api_as(owner)
    client.raise_request_exception = False
    response = client.post(
        SUBMIT, urlencode(body), content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415, response.content[:300]
    assert response.json()["code"] == "unsupported_media_type"
    assert "application/x-www-form-urlencoded" in response.json()["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_multipart_submission_is_refused(owner, small_cluster, api_as):
    response = api_as(owner).post(SUBMIT, FORM_BODIES[0], format="multipart")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_browsable_api_the_schema_and_the_docs_still_render(owner):
    client = Client()
    client.force_login(owner)
    page = client.get(f"{SUBMIT}?format=api", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    # Its raw-data form posts JSON, and offers no form encoding the API would refuse.
    assert b'<option value="application/json"' in page.content
    assert b'<option value="multipart/form-data"' not in page.content
    assert b'<option value="application/x-www-form-urlencoded"' not in page.content
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/schema/?format=json").status_code == 200
    assert client.get("/api/docs/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", [f"{SUBMIT}?format=xml", "/api/v1/queue/?format=csv", "/api/v1/jobs/1/?format=x"]
)
def test_an_unknown_format_is_a_400_naming_it(owner, api_as, path):
    response = api_as(owner).get(path)
    assert response.status_code == 400
    assert response.json() == {"format": ["Unknown format; choose api or json."]}


@pytest.mark.django_db
def test_the_schema_keeps_its_own_formats(owner, api_as):
    client = api_as(owner)
    assert client.get("/api/schema/?format=json").status_code == 200
    assert client.get("/api/schema/?format=yaml").status_code == 200
    response = client.get("/api/schema/?format=xml")
    assert response.status_code == 400
    assert response.json() == {"format": ["Unknown format; choose json or yaml."]}


@pytest.mark.django_db
def test_a_known_format_still_answers_a_missing_job_with_a_404(owner, api_as):
    response = api_as(owner).get("/api/v1/jobs/999999/?format=json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_the_schema_states_the_submissions_limits_and_its_415(owner, small_cluster, api_as):
    client = api_as(owner)
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"][SUBMIT]["post"]
    assert list(operation["requestBody"]["content"]) == ["application/json"]
    body = schema["components"]["schemas"]["JobSubmitInput"]
    fields = body["properties"]
    assert body["additionalProperties"] is False
    assert fields["image"]["maxLength"] == 255
    assert fields["name"]["maxLength"] == 128
    assert fields["num_gpus"]["maximum"] == 4096
    assert fields["env"]["maxProperties"] == 256
    assert fields["command"]["items"]["maxLength"] == 8192

    validator = jsonschema.Draft7Validator({**body, "components": schema["components"]})
    good = {"image": "pytorch/pytorch:2.4.0", "command": ["python"]}
    assert not list(validator.iter_errors(good))
    assert list(validator.iter_errors({**good, "gpus": 2}))  # as the API refuses it

    refused = client.post(SUBMIT, "a=1", content_type="application/x-www-form-urlencoded")
    declared = operation["responses"][str(refused.status_code)]["content"]["application/json"]
    validator = jsonschema.Draft7Validator(
        {**declared["schema"], "components": schema["components"]}
    )
    assert not list(validator.iter_errors(refused.json()))


@pytest.mark.django_db
def test_json_submissions_work_as_before(owner, small_cluster):
    client = APIClient()
    client.force_login(owner)
    body = {"image": "pytorch/pytorch:2.4.0", "command": ["python"], "env": {"A": "1"}}
    response = client.post(SUBMIT, json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
