"""The usage report page (admins): GPU-hours by user, group and device type, and its CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import LabGroup, User
from cluster.models import DeviceType
from dashboard.models import UsageHour
from dashboard.selectors.usage import csv_safe, usage_report
from jobs.choices import JobState
from jobs.models import Job
from tests.dashboard.helpers import logged_in
from tests.factories import JobFactory

HOUR = 3600.0


def used(user, group, device_type, *, at: datetime, hours: float) -> None:
    UsageHour.objects.create(
        hour=at,
        user=user,
        group=group,
        device_type=device_type,
        gpu_seconds=hours * HOUR,
        service=hours * HOUR * device_type.speed,
    )


@pytest.fixture
def types(small_cluster) -> dict[str, DeviceType]:
    return {t.name: t for t in DeviceType.objects.all()}


@pytest.fixture
def march(owner, teammate, outsider, vision, nlp, types) -> None:
    """alice: 2 h a100 + 1 h v100, bob: 3 h v100 (vision); carol: 4 h a100 (nlp), in March."""
    day = datetime(2026, 3, 10, 9, tzinfo=UTC)
    used(owner, vision, types["a100"], at=day, hours=2)
    used(owner, vision, types["v100"], at=day + timedelta(hours=1), hours=1)
    used(teammate, vision, types["v100"], at=day, hours=3)
    used(outsider, nlp, types["a100"], at=day + timedelta(days=5), hours=4)
    used(outsider, None, types["v100"], at=day, hours=0.5)  # a job without a group
    used(outsider, nlp, types["a100"], at=datetime(2026, 4, 2, tzinfo=UTC), hours=100)


@pytest.mark.django_db
def test_hours_per_user_and_group_by_device_type_with_totals(march):
    report = usage_report(start=date(2026, 3, 1), end=date(2026, 3, 31))

    assert report.device_types == ["a100", "v100"]
    users = {line.name: line for line in report.users}
    assert [(c.gpu_hours, c.normalized_hours) for c in users["alice"].cells] == [(2, 4), (1, 1)]
    assert users["alice"].total.gpu_hours == 3 and users["alice"].total.normalized_hours == 5
    assert users["carol"].total.gpu_hours == 4.5  # the April row is outside the range
    groups = {line.name: line for line in report.groups}
    assert groups["vision"].total.gpu_hours == 6 and groups["vision"].total.normalized_hours == 8
    assert groups["(no group)"].total.gpu_hours == 0.5
    assert report.total.gpu_hours == 10.5 and report.total.normalized_hours == 16.5
    assert [c.gpu_hours for c in report.type_totals] == [6, 4.5]


@pytest.mark.django_db
def test_both_days_of_the_range_are_included(owner, vision, types):
    used(owner, vision, types["v100"], at=datetime(2026, 3, 1, 0, tzinfo=UTC), hours=1)
    used(owner, vision, types["v100"], at=datetime(2026, 3, 2, 23, tzinfo=UTC), hours=2)
    used(owner, vision, types["v100"], at=datetime(2026, 3, 3, 0, tzinfo=UTC), hours=4)

    report = usage_report(start=date(2026, 3, 1), end=date(2026, 3, 2))

    assert report.total.gpu_hours == 3


@pytest.mark.django_db
def test_the_page_shows_the_tables_for_the_range(march, lab_admin):
    response = logged_in(lab_admin).get("/usage/?start=2026-03-01&end=2026-03-31")

    html = response.content.decode()
    assert response.status_code == 200
    for name in ("alice", "bob", "carol", "vision", "nlp", "(no group)", "a100", "v100"):
        assert name in html
    assert "10.5" in html and "16.5" in html
    assert "start=2026-03-01&amp;end=2026-03-31&amp;format=csv" in html


@pytest.mark.django_db
def test_the_default_range_is_the_last_30_days(owner, vision, types, lab_admin):
    now = timezone.now()
    used(owner, vision, types["v100"], at=now - timedelta(days=3), hours=2)
    used(owner, vision, types["v100"], at=now - timedelta(days=45), hours=7)

    response = logged_in(lab_admin).get("/usage/")

    report = response.context["report"]
    assert report.end == timezone.localdate()
    assert report.start == timezone.localdate() - timedelta(days=29)
    assert report.total.gpu_hours == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("start=2026-13-01", "start", "Start:"),
        ("start=yesterday&end=2026-03-01", "start", "Start:"),
        ("end=03/01/2026", "end", "End:"),
        ("start=2026-03-10&end=2026-03-01", "end", "before the start"),
        ("start=2020-01-01&end=2026-01-01", "end", "At most"),
        ("end=9999-12-31", "end", "after today"),
        ("start=9999-12-31&end=9999-12-31", "end", "after today"),
    ],
)
def test_bad_dates_name_the_field_without_a_500(lab_admin, query, field, words):
    response = logged_in(lab_admin).get(f"/usage/?{query}")

    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert words in response.content.decode()
    assert response.context["report"] is None
    csv_response = logged_in(lab_admin).get(f"/usage/?{query}&format=csv")
    assert csv_response.status_code == 400 and csv_response["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_students_get_403(owner):
    assert logged_in(owner).get("/usage/").status_code == 403
    assert logged_in(owner).get("/usage/?format=csv").status_code == 403


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get("/usage/")
    assert response.status_code == 302 and response.url.startswith("/login/")


# ----------------------------------------------------------------------------- CSV


@pytest.mark.django_db
def test_the_csv_download_holds_the_same_table(march, lab_admin):
    response = logged_in(lab_admin).get("/usage/?start=2026-03-01&end=2026-03-31&format=csv")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == (
        'attachment; filename="gpulab-usage-20260301-20260331.csv"'
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "kind",
        "name",
        "a100 GPU-hours",
        "a100 normalized GPU-hours",
        "v100 GPU-hours",
        "v100 normalized GPU-hours",
        "total GPU-hours",
        "total normalized GPU-hours",
        "jobs started",
        "mean wait hours",
        "median wait hours",
        "p95 wait hours",
    ]
    by_name = {(row[0], row[1]): row[2:] for row in rows[1:]}
    assert by_name[("user", "alice")] == [
        "2.000", "4.000", "1.000", "1.000", "3.000", "5.000", "0", "", "", "",
    ]  # fmt: skip
    assert by_name[("group", "(no group)")][4:6] == ["0.500", "0.500"]
    assert by_name[("total", "all")][4:6] == ["10.500", "16.500"]
    assert len(rows) == 1 + 3 + 3 + 1


@pytest.mark.django_db
def test_csv_cells_cannot_run_as_spreadsheet_formulas(types, lab_admin):
    # Names straight into the table (the ORM does not run username validators): the worst case.
    evil_user = User.objects.create(username='=HYPERLINK("http://x","y")')
    evil_group = LabGroup.objects.create(name="-2+3")
    at_user = User.objects.create(username="@SUM(A1)")
    day = datetime(2026, 3, 10, tzinfo=UTC)
    used(evil_user, evil_group, types["v100"], at=day, hours=1)
    used(at_user, evil_group, types["v100"], at=day, hours=1)

    response = logged_in(lab_admin).get("/usage/?start=2026-03-01&end=2026-03-31&format=csv")

    names = [row[1] for row in csv.reader(io.StringIO(response.content.decode()))][1:]
    assert '\'=HYPERLINK("http://x","y")' in names
    assert "'@SUM(A1)" in names and "'-2+3" in names
    assert not any(name[:1] in "=+-@" for name in names)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@A1", "'@A1"),
        ("\t=1", "'\t=1"),
        ("alice", "alice"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_csv_safe_quotes_only_a_leading_formula_character(value, expected):
    assert csv_safe(value) == expected


@pytest.mark.django_db
def test_the_report_costs_a_bounded_number_of_queries(
    owner, vision, types, lab_admin, django_assert_max_num_queries
):
    users = [User.objects.create(username=f"u{n}") for n in range(40)]
    now = timezone.now()
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=now - timedelta(hours=h),
            user=user,
            group=vision,
            device_type=types["a100" if h % 2 else "v100"],
            gpu_seconds=HOUR,
            service=HOUR,
        )
        for user in users
        for h in range(1, 48, 3)
    )
    for user in users:  # and each started a job: one query for every wait, however many
        started(user, vision, submitted=now - timedelta(hours=2), waited_minutes=30)
    client = logged_in(lab_admin)

    with django_assert_max_num_queries(7):
        response = client.get("/usage/")
    with django_assert_max_num_queries(7):
        client.get("/usage/?format=csv")

    assert len(response.context["report"].users) == 40


def started(owner, group, *, submitted: datetime, waited_minutes: float) -> None:  # type: ignore[no-untyped-def]
    job = JobFactory(owner=owner, group=group, state=JobState.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(
        submitted_at=submitted, first_started_at=submitted + timedelta(minutes=waited_minutes)
    )


@pytest.mark.django_db
def test_waits_per_user_and_group_of_the_jobs_that_started_in_the_range(  # type: ignore[no-untyped-def]
    owner, teammate, outsider, vision, nlp, lab_admin, types
):
    day = datetime(2026, 3, 10, 9, tzinfo=UTC)
    for minutes in (10, 20, 30, 40, 300):  # alice: median 30 min, nearest-rank p95 300 min
        started(owner, vision, submitted=day, waited_minutes=minutes)
    started(teammate, vision, submitted=day, waited_minutes=60)
    started(outsider, None, submitted=day, waited_minutes=5)
    # Submitted in February, started in March: counted; started in April: not.
    started(outsider, nlp, submitted=datetime(2026, 2, 28, 23, tzinfo=UTC), waited_minutes=120)
    started(outsider, nlp, submitted=datetime(2026, 3, 31, 23, tzinfo=UTC), waited_minutes=600)
    JobFactory(owner=outsider, state=JobState.PENDING)  # never started: no wait yet

    report = usage_report(start=date(2026, 3, 1), end=date(2026, 3, 31))

    users = {line.name: line.waits for line in report.users}
    assert users["alice"] is not None
    assert (users["alice"].started, users["alice"].median_seconds) == (5, 30 * 60)
    assert users["alice"].p95_seconds == 300 * 60
    assert users["alice"].mean_seconds == 80 * 60
    assert users["carol"].started == 2  # the no-group job and the one from February
    groups = {line.name: line.waits for line in report.groups}
    assert groups["vision"].started == 6 and groups["(no group)"].started == 1
    assert groups["nlp"].started == 1 and groups["nlp"].median_seconds == 120 * 60
    assert report.waits is not None and report.waits.started == 8

    client = logged_in(lab_admin)
    page = client.get("/usage/?start=2026-03-01&end=2026-03-31").content.decode()
    assert "Median wait" in page and "30 min" in page and "5 h" in page
    rows = list(
        csv.reader(
            io.StringIO(
                client.get("/usage/?start=2026-03-01&end=2026-03-31&format=csv").content.decode()
            )
        )
    )
    by_name = {(row[0], row[1]): row for row in rows[1:]}
    assert by_name[("user", "alice")][-4:] == ["5", "1.333", "0.500", "5.000"]
    assert by_name[("total", "all")][-4][0] == "8"
    api = client.get("/api/v1/usage/?start=2026-03-01&end=2026-03-31").json()
    waits = {(row["kind"], row["name"]): row for row in api["waits"]}
    assert waits[("user", "alice")]["p95_wait_seconds"] == 300 * 60
    assert waits[("group", "vision")]["jobs_started"] == 6
    assert api["all_waits"]["jobs_started"] == 8


@pytest.mark.django_db
def test_a_user_who_only_started_a_job_is_listed_but_not_counted_as_using_gpus(  # type: ignore[no-untyped-def]
    owner, teammate, vision, types, lab_admin
):
    day = datetime(2026, 3, 10, 9, tzinfo=UTC)
    used(owner, vision, types["a100"], at=day, hours=2)
    started(teammate, vision, submitted=day, waited_minutes=15)  # hours not aggregated yet
    response = logged_in(lab_admin).get("/usage/?start=2026-03-01&end=2026-03-31")
    report = response.context["report"]
    assert [line.name for line in report.users] == ["alice", "bob"]
    assert report.users_with_usage == 1


@pytest.mark.django_db
def test_students_see_no_waits_of_others(owner, vision, api_as):  # type: ignore[no-untyped-def]
    assert logged_in(owner).get("/usage/").status_code == 403
    assert api_as(owner).get("/api/v1/usage/").status_code == 403
