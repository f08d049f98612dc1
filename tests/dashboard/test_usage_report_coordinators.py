"""The usage report for a group coordinator: their groups only, as Slurm's `sreport` shows
an account coordinator their accounts. A member's hours and waits for another group, and
other groups' rows, never reach them."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import LabGroup, User
from accounts.services import lab_group_members_set, user_create
from tests.dashboard.helpers import logged_in
from tests.dashboard.test_usage_report import march, started, types, used  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

MARCH = "start=2026-03-01&end=2026-03-31"


@pytest.fixture
def coordinator(vision: LabGroup, lab_admin: User) -> User:
    """pat: coordinates vision, belongs to no group."""
    pat = user_create(username="pat", password="pw-pat-123", groups=[])
    lab_group_members_set(
        actor=lab_admin, group=vision, members=vision.members.all(), coordinators=[pat]
    )
    return User.objects.get(pk=pat.pk)


@pytest.fixture
def alice_in_nlp_too(owner, vision, nlp, types):  # noqa: F811 (types: a fixture)
    """alice also ran 5 h on an a100 for nlp, and started jobs for both groups."""
    owner.lab_groups.add(nlp)
    day = datetime(2026, 3, 12, 9, tzinfo=UTC)
    used(owner, nlp, types["a100"], at=day, hours=5)
    started(owner, vision, submitted=day, waited_minutes=10)
    started(owner, nlp, submitted=day, waited_minutes=600)


def test_the_page_holds_the_coordinated_group_and_each_members_hours_for_it(
    march,  # noqa: F811 (a fixture)
    alice_in_nlp_too,
    coordinator,
):
    response = logged_in(coordinator).get(f"/usage/?{MARCH}")

    assert response.status_code == 200
    report = response.context["report"]
    assert report.scope == ("vision",)
    assert [line.name for line in report.groups] == ["vision"]
    users = {line.name: line for line in report.users}
    assert set(users) == {"alice", "bob"}  # carol never ran for vision
    assert users["alice"].total.gpu_hours == 3  # not her 5 h for nlp
    assert users["alice"].waits is not None and users["alice"].waits.started == 1
    assert users["alice"].waits.mean_seconds == 10 * 60  # not the nlp job's 10 h
    assert report.total.gpu_hours == 6
    html = response.content.decode()
    assert "Usage report: vision" in html and "another group" in html
    assert "carol" not in html and "nlp" not in html and "(no group)" not in html


def test_the_csv_and_the_api_hold_the_same_scope(march, alice_in_nlp_too, coordinator, api_as):  # noqa: F811
    body = logged_in(coordinator).get(f"/usage/?{MARCH}&format=csv").content.decode()
    rows = list(csv.reader(io.StringIO(body)))
    names = {(row[0], row[1]) for row in rows[1:]}
    assert names == {("user", "alice"), ("user", "bob"), ("group", "vision"), ("total", "all")}
    by_name = {(row[0], row[1]): row for row in rows[1:]}
    assert by_name[("total", "all")][6] == "6.000"  # total GPU-hours: vision's only

    api = api_as(coordinator).get(f"/api/v1/usage/?{MARCH}").json()
    assert api["groups"] == ["vision"]
    assert {(row["kind"], row["name"]) for row in api["rows"]} == {
        ("user", "alice"),
        ("user", "bob"),
        ("group", "vision"),
    }
    assert api["gpu_hours"] == 6
    assert api["all_waits"]["jobs_started"] == 1


def test_a_lab_admin_still_sees_the_whole_lab(march, alice_in_nlp_too, lab_admin, api_as):  # noqa: F811
    report = logged_in(lab_admin).get(f"/usage/?{MARCH}").context["report"]
    assert report.scope is None
    assert {line.name for line in report.groups} == {"vision", "nlp", "(no group)"}
    assert {line.name: line.total.gpu_hours for line in report.users}["alice"] == 8
    assert api_as(lab_admin).get(f"/api/v1/usage/?{MARCH}").json()["groups"] is None


def test_members_who_coordinate_nothing_get_403_and_no_link(march, teammate, coordinator, api_as):  # noqa: F811
    assert logged_in(teammate).get("/usage/").status_code == 403
    assert logged_in(teammate).get("/usage/?format=csv").status_code == 403
    response = api_as(teammate).get("/api/v1/usage/")
    assert response.status_code == 403 and "coordinators" in response.json()["detail"]
    assert 'href="/usage/"' not in logged_in(teammate).get("/jobs/").content.decode()
    assert 'href="/usage/"' in logged_in(coordinator).get("/jobs/").content.decode()


def test_a_coordinator_removed_from_the_group_loses_the_report(
    march,  # noqa: F811
    coordinator,
    vision,
    lab_admin,
):
    lab_group_members_set(
        actor=lab_admin, group=vision, members=vision.members.all(), coordinators=[]
    )
    assert logged_in(User.objects.get(pk=coordinator.pk)).get("/usage/").status_code == 403


def test_the_scoped_report_costs_two_queries_more_than_the_admins(
    owner,
    vision,
    types,  # noqa: F811 (a fixture)
    coordinator,
    django_assert_max_num_queries,
):
    now = datetime.now(UTC)
    for hours_ago in range(1, 40, 3):
        used(owner, vision, types["v100"], at=now - timedelta(hours=hours_ago), hours=1)
        started(owner, vision, submitted=now - timedelta(hours=hours_ago), waited_minutes=5)
    client = logged_in(coordinator)
    # The admin's 7, and the viewer's coordinated groups and their names.
    with django_assert_max_num_queries(9):
        response = client.get("/usage/")
    assert response.context["report"].total.gpu_hours > 0
