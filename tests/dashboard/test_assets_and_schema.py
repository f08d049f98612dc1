"""plotly.js comes from the installed plotly package (never a CDN); the API schema lists
every dashboard endpoint."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import plotly
import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from agents.logs import LogTail
from dashboard.finders import PLOTLY_JS_STATIC_PATH
from jobs.choices import HOLDING_STATES
from jobs.models import Job


def test_the_finder_exposes_exactly_the_packaged_plotly_js():
    found = finders.find(PLOTLY_JS_STATIC_PATH)
    assert found == str(Path(plotly.__file__).parent / "package_data" / "plotly.min.js")
    assert finders.find("vendor/widgetbundle.js") is None  # nothing else of the package


@pytest.mark.django_db
def test_plotly_js_is_served_locally_with_the_package_version(owner):
    client = Client()
    client.force_login(owner)
    page = client.get("/queue/").content.decode()
    assert '<script src="/static/vendor/plotly.min.js" defer>' in page
    assert "cdn" not in page.lower()
    response = client.get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)[:400].decode()
    assert "plotly.js" in body.lower()


def test_collectstatic_copies_plotly_js_for_production(tmp_path, settings):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    copied = tmp_path / "vendor" / "plotly.min.js"
    assert copied.exists() and copied.stat().st_size > 1_000_000
    assert not (tmp_path / "vendor" / "datasets").exists()


@pytest.mark.django_db
def test_the_openapi_schema_documents_the_dashboard_endpoints(owner):
    client = Client()
    client.force_login(owner)
    schema = client.get("/api/schema/?format=json").json()
    for path in ("queue", "cluster", "utilization", "fairness", "usage"):
        operation = schema["paths"][f"/api/v1/{path}/"]["get"]
        assert operation["summary"], path
        assert operation["responses"]["200"]["content"], path


# ---------------------------------------------------------------- responses match the schema


def _json_schema(node, *, strict: bool):
    """OpenAPI 3.0 schema → JSON Schema: `nullable` becomes a null alternative, and
    (strict) an object with listed properties admits no others, so a field the API returns
    but the schema does not describe fails too."""
    if isinstance(node, list):
        return [_json_schema(item, strict=strict) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value, strict=strict) for key, value in node.items()}
    if strict and "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if node.pop("nullable", False):
        node = {"anyOf": [node, {"type": "null"}]}
    return node


@pytest.mark.django_db
def test_real_responses_of_the_api_match_its_openapi_schema(
    owner, lab_admin, small_cluster, api_as, monkeypatch
):
    import jsonschema

    from accounts.services import user_create
    from dashboard.services import aggregates_update
    from scheduler.services import scheduling_round_run

    submit = {"image": "pytorch/pytorch:2.4.0", "command": ["python"], "num_gpus": 2}
    student, admin = api_as(owner), api_as(lab_admin)
    # A user without a group: `group` is null in his jobs.
    loner = api_as(user_create(username="dave", password="pw-dave-1234", groups=[]))
    created = [student.post("/api/v1/jobs/", submit, format="json") for _ in range(3)]
    created.append(loner.post("/api/v1/jobs/", submit, format="json"))
    scheduling_round_run()  # some start (event without a user), the rest wait with a reason
    aggregates_update()
    job_id = created[0].json()["id"]
    schema = student.get("/api/schema/?format=json").json()
    components = _json_schema(schema["components"], strict=True)

    def check(response, path: str, method: str = "get") -> None:
        code = str(response.status_code)
        declared = schema["paths"][path][method]["responses"]
        assert code in declared, (path, method, code, response.content[:200])
        body_schema = _json_schema(
            declared[code]["content"]["application/json"]["schema"], strict=True
        )
        validator = jsonschema.Draft7Validator({**body_schema, "components": components})
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(response.json())]
        assert not errors, (method, path, code, errors[:5])

    for response in created:
        check(response, "/api/v1/jobs/", "post")
    check(student.post("/api/v1/jobs/", {"num_gpus": "x"}, format="json"), "/api/v1/jobs/", "post")
    for client in (student, admin):
        check(client.get("/api/v1/jobs/"), "/api/v1/jobs/")
        check(client.get("/api/v1/queue/"), "/api/v1/queue/")
        check(client.get("/api/v1/cluster/"), "/api/v1/cluster/")
        check(client.get("/api/v1/utilization/?window=7d"), "/api/v1/utilization/")
        check(client.get("/api/v1/fairness/"), "/api/v1/fairness/")
    check(student.get("/api/v1/jobs/?state=bogus"), "/api/v1/jobs/")
    check(admin.get("/api/v1/usage/"), "/api/v1/usage/")
    check(student.get("/api/v1/usage/"), "/api/v1/usage/")
    check(loner.get("/api/v1/jobs/"), "/api/v1/jobs/")
    check(student.get(f"/api/v1/jobs/{job_id}/"), "/api/v1/jobs/{job_id}/")
    check(student.get("/api/v1/jobs/999999/"), "/api/v1/jobs/{job_id}/")
    cancel = "/api/v1/jobs/{job_id}/cancel/"
    check(student.post(f"/api/v1/jobs/{job_id}/cancel/"), cancel, "post")
    check(student.post(f"/api/v1/jobs/{job_id}/cancel/"), cancel, "post")  # 409
    check(student.post("/api/v1/jobs/999999/cancel/"), cancel, "post")  # 404
    check(student.get(f"/api/v1/jobs/{job_id}/?bogus=1"), "/api/v1/jobs/{job_id}/")
    check(student.post(f"/api/v1/jobs/{job_id}/cancel/?bogus=1"), cancel, "post")

    # Errors no field is named in: a body that is not JSON or nests too deep, no credentials.
    jobs = "/api/v1/jobs/"
    malformed = student.post(jobs, "{bad", content_type="application/json")
    deep = '{"env": ' + "[" * 70 + "]" * 70 + "}"
    too_deep = student.post(jobs, deep, content_type="application/json")
    for response in (malformed, too_deep):
        assert response.json()["code"] == "parse_error"
        check(response, jobs, "post")
    detail_field = student.post(jobs, {**submit, "detail": "x"}, format="json")
    assert detail_field.json() == {"detail": ["Unknown field."]}
    check(detail_field, jobs, "post")
    anonymous = APIClient()
    for path in ("queue", "cluster", "utilization", "fairness", "usage"):
        check(anonymous.get(f"/api/v1/{path}/"), f"/api/v1/{path}/")
    check(anonymous.get(jobs), jobs)
    check(anonymous.post(jobs, submit, format="json"), jobs, "post")
    check(anonymous.get(f"/api/v1/jobs/{job_id}/"), "/api/v1/jobs/{job_id}/")
    check(anonymous.post(f"/api/v1/jobs/{job_id}/cancel/"), cancel, "post")
    heartbeat = "/api/v1/agents/heartbeat/"
    check(anonymous.post(heartbeat, {}, format="json"), heartbeat, "post")
    logs = "/api/v1/agents/jobs/{job_id}/logs/"
    check(anonymous.get(f"/api/v1/agents/jobs/{job_id}/logs/"), logs)
    check(student.get(f"/api/v1/agents/jobs/{job_id}/logs/?steam=1"), logs)
    check(student.get("/api/v1/agents/jobs/999999/logs/"), logs)  # 404
    running = Job.objects.filter(state__in=HOLDING_STATES).first()
    check(admin.get(f"/api/v1/agents/jobs/{running.pk}/logs/"), logs)
    # A node that cannot be read: 503, with the technical cause for admins.
    unreadable = LogTail("stdout", problem="Cannot reach the node.", detail="ssh: refused")
    monkeypatch.setattr(
        "agents.api.views.job_log_tail",
        lambda **kwargs: dataclasses.replace(unreadable, unavailable=True),
    )
    for client in (student, admin):
        response = client.get(f"/api/v1/agents/jobs/{job_id}/logs/")
        assert response.status_code == 503
        assert ("cause" in response.json()) == (client is admin)
        check(response, logs)


@pytest.mark.django_db
def test_every_api_operation_documents_its_401(client):
    schema = client.get("/api/schema/?format=json").json()
    undocumented = [
        (method, path)
        for path, operations in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method, operation in operations.items()
        if "401" not in operation["responses"]
    ]
    assert schema["paths"] and not undocumented


@pytest.mark.django_db
def test_the_schema_types_the_submission_and_the_nullable_outputs(client):
    schema = client.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    submit = components["JobSubmitInput"]["properties"]
    assert submit["num_gpus"]["type"] == "integer"
    assert submit["max_retries"]["type"] == "integer"
    assert submit["walltime_seconds"]["type"] == "integer"
    assert submit["walltime_seconds"]["nullable"] is True
    assert submit["command"]["items"] == {"type": "string", "maxLength": 8192}
    assert submit["accepted_types"]["items"] == {"type": "string"}
    assert submit["env"]["additionalProperties"] == {"type": "string", "maxLength": 8192}
    assert components["JobOutput"]["properties"]["group"]["nullable"] is True
    assert components["JobEventOutput"]["properties"]["actor_user"]["nullable"] is True
    listing = schema["paths"]["/api/v1/jobs/"]["get"]["responses"]["200"]
    envelope = listing["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"count", "next", "previous", "results"} <= set(components[envelope]["properties"])
    logs = schema["paths"]["/api/v1/agents/jobs/{job_id}/logs/"]["get"]["parameters"]
    (stream,) = [parameter for parameter in logs if parameter["name"] == "stream"]
    assert set(stream["schema"]["enum"]) == {"stdout", "stderr"}
    responses = {
        ("/api/v1/jobs/", "post"): {"201", "400", "401", "429"},
        ("/api/v1/jobs/{job_id}/", "get"): {"200", "400", "401", "404"},
        ("/api/v1/jobs/{job_id}/cancel/", "post"): {"200", "400", "401", "404", "409"},
        ("/api/v1/agents/jobs/{job_id}/logs/", "get"): {"200", "400", "401", "404", "503"},
    }
    for (path, method), codes in responses.items():
        assert codes <= set(schema["paths"][path][method]["responses"]), (path, method)
    logs_responses = schema["paths"]["/api/v1/agents/jobs/{job_id}/logs/"]["get"]["responses"]
    refs = {
        code: logs_responses[code]["content"]["application/json"]["schema"].get("$ref", "")
        for code in ("200", "404", "503")
    }
    assert refs == {
        "200": "#/components/schemas/LogTailOutput",
        "404": "#/components/schemas/ErrorOutput",
        "503": "#/components/schemas/LogsUnavailableOutput",
    }
    # The routes without a trailing slash are served, but listed once, with it.
    assert not [path for path in schema["paths"] if not path.endswith("/")]
