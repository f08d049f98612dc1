"""The queue page and GET /api/v1/queue/: order, reasons, what is ahead, and who sees what."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from cluster.models import Node
from dashboard.models import QueueSample
from dashboard.selectors.queue import reason_in_words
from dashboard.services import aggregates_update
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_submit
from scheduler.services import scheduling_round_run
from tests.dashboard.helpers import device, hold, logged_in
from tests.factories import JobFactory


@pytest.fixture
def queue(owner, outsider, vision, nlp):
    """Three pending jobs in the scheduler's order: carol's, alice's, carol's; one running."""
    now = timezone.now()
    first = JobFactory(
        owner=outsider,
        group=nlp,
        name="carol-secret-1",
        num_gpus=4,
        queue_position=1,
        reason="Behind: 1 job in queue 0",
        pending_since=now - timedelta(minutes=30),
    )
    mine = JobFactory(
        owner=owner,
        group=vision,
        name="alice-train",
        num_gpus=2,
        queue_position=2,
        reason="WaitingForResources: needs 2 × a100 on one node",
        pending_since=now - timedelta(minutes=10),
        attained_service=7200.0,
    )
    last = JobFactory(
        owner=outsider,
        group=nlp,
        name="carol-secret-2",
        num_gpus=1,
        queue_position=3,
        reason="QuotaExceeded: group max GPUs 4",
        pending_since=now - timedelta(minutes=5),
    )
    running = JobFactory(
        owner=outsider,
        group=nlp,
        name="carol-running",
        state=JobState.RUNNING,
        started_at=now - timedelta(hours=1),
        queue_level=1,
    )
    return {"first": first, "mine": mine, "last": last, "running": running}


@pytest.mark.django_db
def test_a_student_sees_her_position_reason_and_what_is_ahead(owner, queue):
    page = logged_in(owner).get("/queue/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "alice-train" in html
    assert "position 2 of 3" in html
    assert "1 job (4 GPUs) ahead" in html
    assert "Waiting for free GPUs: needs 2 × a100 on one node" in html


@pytest.mark.django_db
def test_a_student_with_many_pending_jobs_sees_the_first_ten_and_a_count(owner):
    for position in range(1, 15):
        JobFactory(owner=owner, name=f"job-{position:03d}", queue_position=position)
    html = logged_in(owner).get("/queue/").content.decode()
    assert "and 4 more" in html


@pytest.mark.django_db
def test_a_student_sees_other_users_entries_without_their_names_or_ids(owner, queue):
    html = logged_in(owner).get("/queue/").content.decode()
    assert "carol-secret-1" not in html and "carol-running" not in html
    assert "carol" not in html
    assert f"/jobs/{queue['first'].pk}/" not in html
    assert f"/jobs/{queue['mine'].pk}/" in html
    assert html.count("another user's job") == 3  # two pending, one running


@pytest.mark.django_db
def test_an_admin_sees_every_entry_in_full(lab_admin, queue):
    html = logged_in(lab_admin).get("/queue/").content.decode()
    for job in queue.values():
        assert job.name in html and f"/jobs/{job.pk}/" in html
    assert "another user" not in html


@pytest.mark.django_db
def test_the_page_is_paginated_and_positions_stay_global(owner, lab_admin):
    for position in range(1, 56):
        JobFactory(owner=owner, name=f"job-{position:03d}", queue_position=position)
    second = logged_in(lab_admin).get("/queue/?page=2").content.decode()
    assert "job-051" in second and "job-050" not in second
    assert "Page 2 of 2" in second


@pytest.mark.django_db
def test_the_page_carries_two_charts_and_auto_refreshes(owner, queue):
    aggregates_update()
    page = logged_in(owner).get("/queue/")
    assert page.context["refresh_seconds"] == 10
    length = json.loads(page.context["queue_length_figure"])
    levels = {trace["name"]: trace["y"] for trace in length["data"]}
    assert levels["queue 0"][-1] == 3  # three jobs pending in level 0 at the sample
    waits = json.loads(page.context["wait_figure"])
    waiting_now = next(trace for trace in waits["data"] if trace["name"] == "waiting now")
    assert sum(waiting_now["y"]) == 3
    assert 'data-refresh-id="queue-pending"' in page.content.decode()
    assert "/static/vendor/plotly.min.js" in page.content.decode()


@pytest.mark.django_db
def test_the_waiting_histogram_counts_jobs_by_their_delay_before_first_start(owner):
    now = timezone.now()
    for minutes in (0.5, 3, 3, 200):
        job = JobFactory(owner=owner, state=JobState.SUCCEEDED)
        job.first_started_at = now - timedelta(minutes=1)
        job.submitted_at = job.first_started_at - timedelta(minutes=minutes)
        job.save()
    waits = json.loads(logged_in(owner).get("/queue/").context["wait_figure"])
    started = next(trace for trace in waits["data"] if trace["name"].startswith("waited"))
    counts = dict(zip(started["x"], started["y"], strict=True))
    assert counts["< 1 min"] == 1 and counts["1–5 min"] == 2 and counts["3–12 h"] == 1


@pytest.mark.django_db
def test_the_page_reads_a_bounded_number_of_queries(owner, queue, django_assert_max_num_queries):
    for position in range(4, 200):
        JobFactory(owner=owner, queue_position=position)
    client = logged_in(owner)
    # 13: the groups the viewer coordinates (whose jobs the queue names) is one of them.
    with django_assert_max_num_queries(13):
        client.get("/queue/")


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get("/queue/")
    assert response.status_code == 302 and "/login/" in response.url


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("Behind: 3 jobs in queue 0", "Waiting behind higher-priority jobs: 3 jobs in queue 0"),
        ("QuotaExceeded: user max GPUs 4", "Held by a quota: user max GPUs 4"),
        (
            "NodeDrained: a100 nodes drained",
            "The nodes it needs take no new jobs: a100 nodes drained",
        ),
        ("", "Waiting for the next scheduling round"),
        ("job #4 is checkpointing", "job #4 is checkpointing"),
    ],
)
def test_reasons_are_said_in_words(reason, words):
    assert reason_in_words(reason) == words


# --------------------------------------------------------------------------- API


@pytest.mark.django_db
def test_the_api_gives_the_same_queue_redacted_for_a_student(api_as, owner, queue):
    data = api_as(owner).get("/api/v1/queue/").json()
    assert data["pending_total"] == 3 and data["pending_gpus"] == 7
    assert [entry["queue_position"] for entry in data["pending"]] == [1, 2, 3]
    other = data["pending"][0]
    assert other["job_id"] is None and other["owner"] == "" and other["name"] == ""
    assert other["group"] == "nlp" and other["num_gpus"] == 4
    (mine,) = data["mine"]
    assert mine["job_id"] == queue["mine"].pk
    assert (mine["jobs_ahead"], mine["gpus_ahead"]) == (1, 4)
    assert mine["attained_gpu_hours"] == 2.0
    assert data["running"][0]["job_id"] is None


@pytest.mark.django_db
def test_the_api_shows_an_admin_every_owner(api_as, lab_admin, queue):
    data = api_as(lab_admin).get("/api/v1/queue/").json()
    assert [entry["owner"] for entry in data["pending"]] == ["carol", "alice", "carol"]
    assert data["running"][0]["name"] == "carol-running"


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["0", "abc", "-1", "9", "²", "9" * 5000])
def test_a_bad_page_is_a_400_naming_the_field(api_as, owner, queue, page):
    response = api_as(owner).get(f"/api/v1/queue/?page={page}")
    assert response.status_code == 400
    assert "page" in response.json()


@pytest.mark.django_db
def test_an_unknown_query_parameter_is_a_400_naming_it(api_as, owner, queue):
    response = api_as(owner).get("/api/v1/queue/?page_size=5")
    assert response.status_code == 400
    assert list(response.json()) == ["page_size"]


@pytest.mark.django_db
def test_a_running_job_shows_the_service_of_its_current_run(api_as, owner, small_cluster):
    # 2 × a100 (speed 2) held for 30 minutes: 2 GPU·h normalized, none stored yet.
    devices = [device(small_cluster, "a0", 0), device(small_cluster, "a0", 1)]
    job = hold(owner, devices, start=timezone.now() - timedelta(minutes=30))
    (entry,) = api_as(owner).get("/api/v1/queue/").json()["running"]
    assert entry["job_id"] == job.pk
    assert entry["attained_gpu_hours"] == pytest.approx(2.0, abs=0.01)
    assert '<td class="num">2.0</td>' in logged_in(owner).get("/queue/").content.decode()
    # The job's own page too (2 GPU·h = 7,200 normalized GPU·s).
    page = logged_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "attained 7200 GPU·s" in page or "attained 7201 GPU·s" in page


@pytest.mark.django_db
def test_the_api_needs_authentication():
    assert Client().get("/api/v1/queue/").status_code in (401, 403)


@pytest.mark.django_db
def test_a_real_round_fills_the_reason_and_position_the_queue_shows(owner, small_cluster):
    Node.objects.update(simulated=True)  # a demo cluster: the 8-GPU job spans both a100 nodes
    job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=8))
    job = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=4))
    scheduling_round_run()
    data = logged_in(owner).get("/queue/").content.decode()
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.reason and job.queue_position == 1
    assert reason_in_words(job.reason) in data.replace("&#x27;", "'")


@pytest.mark.django_db
def test_reasons_do_not_name_other_students_jobs(api_as, owner, lab_admin, queue):
    first, mine = queue["first"], queue["mine"]
    Job.objects.filter(pk=mine.pk).update(reason=f"Behind: job {first.pk} is first in line")

    student = api_as(owner).get("/api/v1/queue/").json()
    admin = api_as(lab_admin).get("/api/v1/queue/").json()

    assert student["mine"][0]["reason"] == "Behind: another job is first in line"
    assert admin["mine"] == [] and f"job {first.pk} is first" in str(admin["pending"])


@pytest.mark.django_db
def test_the_queue_length_chart_is_drawn_in_the_labs_time_zone(owner, queue, settings):
    # plotly.js drops UTC offsets: an aware datetime was drawn as UTC wall-clock time,
    # hours away from the utilization charts beside it.
    settings.TIME_ZONE = "America/New_York"
    aggregates_update()
    page = logged_in(owner).get("/queue/")
    (trace, *_) = json.loads(page.context["queue_length_figure"])["data"]
    sampled_at = QueueSample.objects.latest("at").at
    assert trace["x"][-1] == timezone.localtime(sampled_at).strftime("%Y-%m-%d %H:%M")
