"""The submit form's own checks: the walltime bound in the minutes it is typed in, repeated
environment variables, the ids its aria-describedby points at, and a NUL in a field."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from jobs.models import Job

FORM = {
    "image": "pytorch/pytorch:2.4.0",
    "command": "python train.py",
    "num_gpus": "1",
    "consolidation": "preferred",
    "max_retries": "0",
}


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_walltime_past_the_limit_is_refused_in_minutes(owner, small_cluster):
    response = logged_in(owner).post("/jobs/submit/", {**FORM, "walltime_minutes": "50000"})
    assert response.status_code == 400
    assert response.context["form"].errors["walltime_minutes"] == [
        "At most 43200 minutes (30 days)."
    ]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_walltime_at_the_limit_is_accepted(owner, small_cluster):
    response = logged_in(owner).post("/jobs/submit/", {**FORM, "walltime_minutes": "43200"})
    assert response.status_code == 302
    assert Job.objects.get().walltime_seconds == 30 * 24 * 3600


@pytest.mark.django_db
def test_a_variable_set_twice_is_refused_naming_it_and_its_lines(owner, small_cluster):
    env = "A=1\nB=2\n\nA=3"
    response = logged_in(owner).post("/jobs/submit/", {**FORM, "env": env})
    assert response.status_code == 400
    assert response.context["form"].errors["env"] == ["A is set again on line 4 (first on line 1)."]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_api_refuses_a_variable_given_twice(owner, small_cluster, api_as):
    # Python's json keeps the last of two equal keys without a word: refused instead.
    body = '{"image": "busybox", "command": ["a"], "env": {"A": "1", "A": "2"}}'
    response = api_as(owner).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["env"] == ["env.A is given more than once."]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_api_still_takes_distinct_keys(owner, small_cluster, api_as):
    body = json.dumps({"image": "busybox", "command": ["a"], "env": {"A": "1", "B": "2"}})
    response = api_as(owner).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert Job.objects.get().env == {"A": "1", "B": "2"}


@pytest.mark.django_db
def test_help_and_errors_carry_the_ids_the_inputs_point_at(owner, small_cluster):
    response = logged_in(owner).post("/jobs/submit/", {**FORM, "image": "Bad"})
    page = response.content.decode()
    described = re.search(r'<input[^>]*id="id_image"[^>]*>', page)[0]  # type: ignore[index]
    ids = re.search(r'aria-describedby="([^"]*)"', described)[1].split()  # type: ignore[index]
    assert ids == ["id_image_helptext", "id_image_error"]
    for element_id in ids:
        assert f'id="{element_id}"' in page


@pytest.mark.django_db
def test_a_nul_in_a_form_field_is_an_html_page_naming_the_field(owner, small_cluster):
    response = logged_in(owner).post("/jobs/submit/", {**FORM, "env": "A=\x00"})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert "The field <code>env</code> contains a NUL character" in response.content.decode()
    assert not Job.objects.exists()
