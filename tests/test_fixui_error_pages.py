"""gpulab's own 400, 403, 404 and 500 pages, as production (DEBUG off) shows them.

403 and 404 are rendered with the request, so they carry the navigation; 400 and 500 are
rendered by Django without a request or any context, so they must stand on their own.
"""

from __future__ import annotations

import pytest
from django.template.loader import get_template
from django.test import Client, RequestFactory
from django.views import defaults

MY_JOBS = '<a href="/jobs/">Go to my jobs</a>'
NAV = '<nav aria-label="Main">'


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def production(settings):  # type: ignore[no-untyped-def]
    settings.DEBUG = False
    return settings


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/manage/quotas/", "This page is for lab admins."),
        ("/usage/", "The usage report is for lab admins and group coordinators."),
    ],
)
def test_a_students_visit_to_an_admin_page_is_a_403_page_that_says_why(
    production, owner, path, reason
):
    response = logged_in(owner).get(path)

    assert response.status_code == 403
    page = response.content.decode()
    assert reason in page
    assert NAV in page and MY_JOBS in page
    assert "<title>Not allowed · gpulab</title>" in page


@pytest.mark.django_db
def test_a_missing_job_is_a_404_page_with_a_link_back_to_my_jobs(production, owner):
    response = logged_in(owner).get("/jobs/987654/")

    assert response.status_code == 404
    page = response.content.decode()
    assert MY_JOBS in page and NAV in page
    assert "not yours to see" in page


@pytest.mark.django_db
def test_an_unknown_address_is_the_same_404_page(production, owner):
    response = logged_in(owner).get("/no-such-page/")

    assert response.status_code == 404
    assert MY_JOBS in response.content.decode()


@pytest.mark.django_db
def test_the_api_still_answers_json_not_the_404_page(production, owner):
    response = logged_in(owner).get("/api/v1/no-such-endpoint/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize(("name", "heading"), [("500.html", "Something went wrong"),
                                               ("400.html", "Bad request")])  # fmt: skip
def test_the_400_and_500_pages_render_standalone(name, heading):
    page = get_template(name).render({})

    assert heading in page and MY_JOBS in page
    assert "/static/css/gpulab.css" in page


def test_djangos_server_error_view_answers_with_the_gpulab_500_page(production):
    response = defaults.server_error(RequestFactory().get("/jobs/"))

    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()
