"""A usage report's bad range names the date the user gave: with only a start, the end is
today by default, so the error is the start's, in the API (400) and on the page alike."""

from __future__ import annotations

import pytest

from tests.dashboard.helpers import logged_in


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("start=2099-01-01", "start", "The start date is after today."),
        (
            "start=2020-01-01",
            "start",
            "At most 366 days per report (without an end, it ends today).",
        ),
        ("start=2026-03-10&end=2026-03-01", "end", "The end date is before the start date."),
        ("start=2020-01-01&end=2026-01-01", "end", "At most 366 days per report."),
    ],
)
@pytest.mark.django_db
def test_the_api_names_the_date_to_change(lab_admin, api_as, query, field, message):
    response = api_as(lab_admin).get(f"/api/v1/usage/?{query}")

    assert response.status_code == 400
    assert response.json() == {field: [message]}


@pytest.mark.parametrize("query", ["start=2099-01-01", "start=2020-01-01"])
@pytest.mark.django_db
def test_the_page_shows_the_error_at_the_start_it_was_given(lab_admin, query):
    response = logged_in(lab_admin).get(f"/usage/?{query}")

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["start"]
    assert 'id="usage-start-error"' in response.content.decode()


@pytest.mark.parametrize("end", ["0001-01-01", "0001-01-05", "0001-01-29"])
@pytest.mark.django_db
def test_an_end_in_the_first_month_there_is_gives_a_report_not_a_500(lab_admin, api_as, end):
    # Without a start, the default (29 days before the end) would fall before year 1.
    response = api_as(lab_admin).get(f"/api/v1/usage/?end={end}")

    assert response.status_code == 200
    assert response.json()["start"] == "0001-01-01" and response.json()["end"] == end
    assert logged_in(lab_admin).get(f"/usage/?end={end}").status_code == 200
