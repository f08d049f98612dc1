"""Text PostgreSQL cannot store (NUL, lone surrogates) is a 400 naming where, never a 500."""

from __future__ import annotations

import json

import pytest

from accounts.models import ApiToken
from jobs.models import Job
from tests.dashboard.helpers import logged_in

GOOD = {"image": "busybox", "command": ["python", "train.py"], "num_gpus": 1}


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"command": ["python", "\ud800"]}, "command", "command[1] is not valid Unicode text"),
        ({"env": {"A": "\ud800"}}, "env", "env.A is not valid Unicode text"),
        ({"accepted_types": ["\ud800"]}, "accepted_types", "accepted_types[0] is not valid"),
        ({"name": "a\x00b"}, "name", "name contains a NUL character"),
        ({"group": "\x00"}, "group", "group contains a NUL character"),
    ],
)
@pytest.mark.django_db
def test_a_submission_with_unstorable_text_is_refused_naming_the_field(
    owner, small_cluster, api_as, changes, field, message
):
    # json.dumps escapes both as \ud800 / \u0000, as a client would send them.
    body = json.dumps({**GOOD, **changes})
    response = api_as(owner).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert message in response.json()[field][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("path", "parameter"),
    [("/api/v1/jobs/?owner=%00", "owner"), ("/api/v1/jobs/?group=%00", "group")],
)
@pytest.mark.django_db
def test_an_api_query_parameter_with_a_nul_is_a_json_400_naming_it(lab_admin, path, parameter):
    response = logged_in(lab_admin).get(path)
    assert response.status_code == 400
    assert response.json() == {parameter: [f"Parameter {parameter!r} contains a NUL character."]}


@pytest.mark.parametrize(
    ("path", "parameter"), [("/jobs/?owner=%00", "owner"), ("/manage/quotas/?q=a%00", "q")]
)
@pytest.mark.django_db
def test_a_page_query_parameter_with_a_nul_is_an_html_400_naming_it(lab_admin, path, parameter):
    response = logged_in(lab_admin).get(path)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert f"The field <code>{parameter}</code> contains a NUL character" in page


@pytest.mark.django_db
def test_a_form_field_with_a_nul_is_a_400_and_creates_nothing(owner):
    response = logged_in(owner).post("/account/tokens/", {"name": "a\x00b"})
    assert response.status_code == 400
    assert "<code>name</code> contains a NUL character" in response.content.decode()
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("depth", [65, 100_000])
@pytest.mark.django_db
def test_json_nested_too_deeply_is_a_400_not_a_500(owner, small_cluster, api_as, depth):
    # 100,000 levels made json.load raise RecursionError; 65 is past the cap.
    nested = "[" * depth + "]" * depth
    body = '{"image": "busybox", "command": ["a"], "env": ' + nested + "}"
    response = api_as(owner).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"detail": "JSON nested too deeply.", "code": "parse_error"}
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_json_as_deep_as_the_cap_is_parsed(owner, small_cluster, api_as):
    # 64 levels: the body object, then 63 lists. Refused by job_submit, not by the parser.
    nested = "[" * 63 + "]" * 63
    body = '{"image": "busybox", "command": ["a"], "env": ' + nested + "}"
    response = api_as(owner).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert "env" in response.json()


@pytest.mark.django_db
def test_a_key_given_twice_is_a_400_naming_it_not_the_last_value_silently(
    owner, small_cluster, api_as
):
    body = '{"image": "busybox", "command": ["a"], "num_gpus": 1, "num_gpus": 2}'
    response = api_as(owner).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"num_gpus": ["num_gpus is given more than once."]}
    assert not Job.objects.exists()
