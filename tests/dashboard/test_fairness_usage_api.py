"""GET /api/v1/fairness/ and GET /api/v1/usage/: contract, visibility, bad parameters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import User
from cluster.models import DeviceType
from dashboard.models import UsageHour
from jobs.services import JobSpec, job_submit

HOUR = 3600.0


def used(user, group, *, at: datetime, hours: float, type_name: str = "v100") -> None:
    device_type = DeviceType.objects.get(name=type_name)
    UsageHour.objects.create(
        hour=at,
        user=user,
        group=group,
        device_type=device_type,
        gpu_seconds=hours * HOUR,
        service=hours * HOUR * device_type.speed,
    )


def submit(user: User) -> None:
    job_submit(owner=user, spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["x"]))


@pytest.fixture
def busy_lab(owner, teammate, outsider, vision, nlp, small_cluster) -> None:
    now = timezone.now()
    used(owner, vision, at=now - timedelta(hours=2), hours=3)
    used(teammate, vision, at=now - timedelta(hours=2), hours=1)
    used(outsider, nlp, at=now - timedelta(days=3), hours=4)
    for user in (owner, teammate, outsider):
        submit(user)


# ----------------------------------------------------------------------------- fairness


@pytest.mark.django_db
def test_fairness_gives_shares_weights_jain_and_order_to_an_admin(busy_lab, lab_admin, api_as):
    response = api_as(lab_admin).get("/api/v1/fairness/?window=7d")

    assert response.status_code == 200
    body = response.json()
    groups = {row["name"]: row for row in body["groups"]}
    assert groups["vision"]["share"] == pytest.approx(0.5)
    assert groups["vision"]["weight"] == 2.0
    assert groups["vision"]["entitled"] == pytest.approx(2 / 3)
    assert body["group_jain"] == pytest.approx((0.75 + 1.5) ** 2 / (2 * (0.75**2 + 1.5**2)))
    assert {row["name"] for row in body["users"]} == {"alice", "bob", "carol"}
    assert [row["rank"] for row in body["order"]] == [1, 1, 1]  # nobody has usage stored yet
    assert {row["user"] for row in body["order"]} == {"alice", "bob", "carol"}
    assert body["window"] == "7d" and body["policy"] == "las" and body["fair_share_applies"]


@pytest.mark.django_db
def test_fairness_hides_other_users_from_a_student(busy_lab, owner, api_as):
    response = api_as(owner).get("/api/v1/fairness/")

    text = response.content.decode()
    assert response.status_code == 200
    assert "bob" not in text and "carol" not in text
    body = response.json()
    assert [(row["name"], row["is_self"]) for row in body["users"]] == [
        ("alice", True),
        ("other users", False),
    ]
    assert body["users"][1]["weight"] is None
    assert body["users"][1]["share"] == pytest.approx(5 / 8)
    others = [row for row in body["order"] if not row["is_self"]]
    assert len(others) == 2
    assert all(row["user"] is None and row["group"] is None for row in others)
    assert {row["name"] for row in body["groups"]} == {"vision", "nlp"}


@pytest.mark.django_db
def test_the_window_narrows_the_usage(busy_lab, lab_admin, api_as):
    body = api_as(lab_admin).get("/api/v1/fairness/?window=24h").json()

    groups = {row["name"]: row for row in body["groups"]}
    assert groups["vision"]["share"] == 1.0
    assert groups["nlp"]["share"] == 0.0  # still a participant: it has a pending job


@pytest.mark.django_db
# Empty is refused too, as on /api/v1/utilization/: only an absent window is the default.
@pytest.mark.parametrize("window", ["1y", "7", "WEEK", ""])
def test_a_bad_window_is_400_naming_the_field(owner, api_as, window):
    response = api_as(owner).get(f"/api/v1/fairness/?window={window}")

    assert response.status_code == 400
    assert response.json() == {"window": ["Choose one of: 24h, 7d, 30d."]}


@pytest.mark.django_db
def test_fairness_needs_a_login():
    assert APIClient().get("/api/v1/fairness/").status_code in (401, 403)


# ----------------------------------------------------------------------------- usage


@pytest.mark.django_db
def test_usage_gives_rows_per_user_group_and_device_type(
    owner, outsider, vision, nlp, lab_admin, small_cluster, api_as
):
    day = datetime(2026, 3, 10, 12, tzinfo=UTC)
    used(owner, vision, at=day, hours=2, type_name="a100")
    used(owner, vision, at=day, hours=1)
    used(outsider, nlp, at=day, hours=5)

    response = api_as(lab_admin).get("/api/v1/usage/?start=2026-03-01&end=2026-03-31")

    assert response.status_code == 200
    body = response.json()
    assert body["start"] == "2026-03-01" and body["end"] == "2026-03-31"
    rows = {(r["kind"], r["name"], r["device_type"]): r for r in body["rows"]}
    assert set(rows) == {
        ("user", "alice", "a100"),
        ("user", "alice", "v100"),
        ("user", "carol", "v100"),
        ("group", "vision", "a100"),
        ("group", "vision", "v100"),
        ("group", "nlp", "v100"),
    }
    assert rows[("user", "alice", "a100")]["gpu_hours"] == 2
    assert rows[("user", "alice", "a100")]["normalized_gpu_hours"] == 4
    assert body["gpu_hours"] == 8 and body["normalized_gpu_hours"] == 10


@pytest.mark.django_db
def test_usage_is_403_for_students(owner, api_as):
    assert api_as(owner).get("/api/v1/usage/").status_code == 403


@pytest.mark.django_db
def test_usage_needs_a_login():
    assert APIClient().get("/api/v1/usage/").status_code in (401, 403)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("start=2026-02-30", "start"),
        ("start=2026-03-01&end=tomorrow", "end"),
        ("start=2026-03-10&end=2026-03-01", "end"),
        ("end=9999-12-31", "end"),  # was a 500: the day after overflowed the date type
    ],
)
def test_usage_bad_dates_are_400_naming_the_field(lab_admin, api_as, query, field):
    response = api_as(lab_admin).get(f"/api/v1/usage/?{query}")

    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.django_db
def test_the_schema_documents_both_endpoints(lab_admin, api_as):
    schema = api_as(lab_admin).get("/api/schema/?format=json").json()

    assert "/api/v1/fairness/" in schema["paths"] and "/api/v1/usage/" in schema["paths"]
    assert "FairnessOutput" in schema["components"]["schemas"]
