"""Estimated start times (scheduler.forecast_services) against the real database: the
live snapshot replayed forward through the configured policy, stored per pending job,
scored once jobs start, and shown to their owners (API and pages) and to no one else."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import JobSpec, job_submit
from scheduler.forecast_services import (
    BEYOND_CUT_NOTE,
    DEFAULT_RUN_SECONDS,
    HELD_NOTE,
    NEVER_NOTE,
    _work_left,
    start_forecasts_refresh,
)
from scheduler.models import StartForecast, StartForecastScore
from scheduler.selectors import (
    scheduler_config_get,
    scheduler_settings_from,
    start_forecast_accuracy,
    start_forecast_of,
)
from scheduler.services import scheduling_round_run
from scheduler.snapshot import snapshot_build
from scheduler.tasks import start_forecasts_task
from tests.factories import JobFactory
from tests.scheduler.livefixtures import configure, configure_tiresias_rules, simulated_cluster

pytestmark = pytest.mark.django_db


def _submit(owner, gpus: int = 4, **fields) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "5"], num_gpus=gpus, **fields)
    return job_submit(owner=owner, spec=spec)


def _run_start(job: Job):  # type: ignore[no-untyped-def]
    return Allocation.objects.filter(job=job, ended_at__isnull=True).values_list(
        "started_at", flat=True
    )[0]


def _running_and_waiting(owner, *, running_walltime: int = 600) -> tuple[Job, Job]:  # type: ignore[no-untyped-def]
    """A job holding all 4 GPUs for `running_walltime` s, and a 4-GPU job waiting."""
    running = _submit(owner, walltime_seconds=running_walltime)
    scheduling_round_run()
    waiting = _submit(owner, walltime_seconds=60)
    scheduling_round_run()
    return running, waiting


def _forecast_wait_behind_a_job_without_walltime(owner) -> float:  # type: ignore[no-untyped-def]
    """Seconds from the start of a running 4-GPU job with no walltime to the forecast start
    of the 4-GPU job waiting behind it: how long the forecast expects the first to run."""
    first = _submit(owner)
    scheduling_round_run()
    second = _submit(owner)
    scheduling_round_run()
    start_forecasts_refresh(now=timezone.now())
    return (StartForecast.objects.get(job=second).start_at - _run_start(first)).total_seconds()


@pytest.fixture
def cluster() -> None:
    # One queue so large that no job here is demoted: a waiting job starts when the
    # running one ends, not when LAS would preempt it (tests/scheduler/sim covers that).
    configure_tiresias_rules()
    configure(queue_thresholds=[1e9])
    simulated_cluster(nodes=1, gpus_per_node=4)


def test_a_waiting_job_starts_when_the_walltime_of_the_one_before_it_ends(owner, cluster):  # type: ignore[no-untyped-def]
    first = _submit(owner, walltime_seconds=600)
    scheduling_round_run()
    second = _submit(owner, walltime_seconds=300)
    third = _submit(owner, walltime_seconds=300)
    scheduling_round_run()
    summary = start_forecasts_refresh(now=timezone.now())
    assert (summary.pending, summary.estimated) == (2, 2)
    started = _run_start(first)
    second_forecast = StartForecast.objects.get(job=second)
    assert abs((second_forecast.start_at - started).total_seconds() - 600) < 1
    third_start = StartForecast.objects.get(job=third).start_at
    assert abs((third_start - started).total_seconds() - 900) < 1
    assert second_forecast.note == ""
    # The first estimate is kept for scoring.
    assert second_forecast.first_start_at == second_forecast.start_at


def test_without_a_walltime_a_job_runs_as_long_as_its_owners_recent_jobs(  # type: ignore[no-untyped-def]
    owner, outsider, cluster
):
    # The lab's median is 300 s; alice's own jobs ran 1200 s, and hers is what counts.
    for _ in range(5):
        JobFactory(owner=owner, state=JobState.SUCCEEDED, total_run_seconds=1200.0)
    for _ in range(7):
        JobFactory(owner=outsider, state=JobState.SUCCEEDED, total_run_seconds=300.0)
    wait = _forecast_wait_behind_a_job_without_walltime(owner)
    assert abs(wait - 1200) < 1


def test_with_no_history_a_job_runs_an_hour(owner, cluster):  # type: ignore[no-untyped-def]
    wait = _forecast_wait_behind_a_job_without_walltime(owner)
    assert abs(wait - DEFAULT_RUN_SECONDS) < 1


def test_held_jobs_and_jobs_beyond_the_cut_get_a_note_not_a_time(owner, cluster, settings):  # type: ignore[no-untyped-def]
    settings.GPULAB_FORECAST_MAX_JOBS = 1
    first = _submit(owner, walltime_seconds=600)
    scheduling_round_run()
    ahead, behind = _submit(owner), _submit(owner)
    held = _submit(owner, depends_on=[first.pk], dependency="afterok")
    scheduling_round_run()
    start_forecasts_refresh(now=timezone.now())
    forecasts = {row.job_id: row for row in StartForecast.objects.all()}
    assert forecasts[ahead.pk].start_at is not None
    assert forecasts[behind.pk].start_at is None
    assert forecasts[behind.pk].note == BEYOND_CUT_NOTE.format(count=1)
    assert (forecasts[held.pk].start_at, forecasts[held.pk].note) == (None, HELD_NOTE)
    assert first.pk not in forecasts  # running: nothing to forecast


def test_a_later_forecast_replaces_the_time_and_keeps_the_first(owner, cluster):  # type: ignore[no-untyped-def]
    _, waiting = _running_and_waiting(owner)
    now = timezone.now()
    start_forecasts_refresh(now=now)
    first = StartForecast.objects.get(job=waiting)
    start_forecasts_refresh(now=now + timedelta(seconds=120))
    later = StartForecast.objects.get(job=waiting)
    assert later.made_at == now + timedelta(seconds=120)
    assert (later.first_made_at, later.first_start_at) == (first.made_at, first.start_at)


def test_a_job_that_can_never_fit_has_no_estimate(owner, cluster):  # type: ignore[no-untyped-def]
    too_big = JobFactory(owner=owner, num_gpus=8)
    start_forecasts_refresh(now=timezone.now())
    forecast = StartForecast.objects.get(job=too_big)
    assert forecast.start_at is None
    assert forecast.note == NEVER_NOTE


def _scored_jobs(owner, *, ratios: list[float], now) -> None:  # type: ignore[no-untyped-def]
    """Started jobs whose first forecast said a 1,000 s wait and which waited ratio × that."""
    for ratio in ratios:
        made = now - timedelta(days=1)
        job = JobFactory(
            owner=owner,
            state=JobState.SUCCEEDED,
            first_started_at=made + timedelta(seconds=1000 * ratio),
        )
        StartForecast.objects.create(
            job=job,
            made_at=made,
            first_made_at=made,
            first_start_at=made + timedelta(seconds=1000),
        )


def test_accuracy_is_measured_on_first_forecasts_of_jobs_that_started(owner, db):  # type: ignore[no-untyped-def]
    now = timezone.now()
    _scored_jobs(owner, ratios=[1.0] * 19, now=now)
    assert start_forecast_accuracy(now=now) is None  # too few to say
    _scored_jobs(owner, ratios=[0.5 + i / 10 for i in range(21)], now=now)
    accuracy = start_forecast_accuracy(now=now)
    assert accuracy is not None and accuracy.samples == 40
    assert accuracy.low < 1.0 < accuracy.high
    assert accuracy.median == pytest.approx(1.0)


def test_a_forecast_carries_the_range_past_forecasts_measured(owner, cluster):  # type: ignore[no-untyped-def]
    now = timezone.now()
    _scored_jobs(owner, ratios=[0.5] * 10 + [2.0] * 10 + [1.0] * 20, now=now)
    _, waiting = _running_and_waiting(owner, running_walltime=3600)
    start_forecasts_refresh(now=now)
    forecast = StartForecast.objects.get(job=waiting)
    wait = (forecast.start_at - now).total_seconds()
    assert abs((forecast.earliest_at - now).total_seconds() - 0.5 * wait) < 1
    assert abs((forecast.latest_at - now).total_seconds() - 2.0 * wait) < 1


def test_the_api_shows_a_pending_jobs_estimate_to_its_owner_only(  # type: ignore[no-untyped-def]
    owner, outsider, lab_admin, cluster, api_as
):
    running, waiting = _running_and_waiting(owner)
    start_forecasts_refresh(now=timezone.now())
    forecast = StartForecast.objects.get(job=waiting)

    mine = api_as(owner)
    detail = mine.get(f"/api/v1/jobs/{waiting.pk}/").json()
    assert detail["estimated_start"]["at"] is not None
    assert detail["estimated_start"]["note"] == ""
    listed = {job["id"]: job for job in mine.get("/api/v1/jobs/").json()["results"]}
    assert listed[waiting.pk]["estimated_start"] == detail["estimated_start"]
    assert listed[running.pk]["estimated_start"] is None
    assert detail["estimated_start"]["made_at"] is not None
    assert forecast.start_at is not None

    assert api_as(outsider).get(f"/api/v1/jobs/{waiting.pk}/").status_code == 404
    assert api_as(outsider).get("/api/v1/jobs/").json()["results"] == []
    admin_view = api_as(lab_admin).get(f"/api/v1/jobs/{waiting.pk}/").json()
    assert admin_view["estimated_start"] == detail["estimated_start"]


def test_the_pages_show_the_estimate_to_its_owner_only(owner, outsider, cluster):  # type: ignore[no-untyped-def]
    _, waiting = _running_and_waiting(owner)
    start_forecasts_refresh(now=timezone.now())
    client = Client()
    client.force_login(owner)
    detail = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "Estimated start" in detail
    assert "Its accuracy is not measured yet" in detail
    assert "starts ~" in client.get("/jobs/").content.decode()

    other = Client()
    other.force_login(outsider)
    assert other.get(f"/jobs/{waiting.pk}/").status_code == 404
    assert "starts ~" not in other.get("/jobs/").content.decode()


def test_the_task_refreshes_the_forecasts(owner, cluster):  # type: ignore[no-untyped-def]
    _, waiting = _running_and_waiting(owner)
    assert start_forecasts_task() == {"pending": 1, "estimated": 1}
    assert StartForecast.objects.get(job=waiting).start_at is not None


def test_the_queue_shows_expected_starts(owner, outsider, cluster, api_as):  # type: ignore[no-untyped-def]
    _, waiting = _running_and_waiting(owner)
    start_forecasts_refresh(now=timezone.now())
    expected = StartForecast.objects.get(job=waiting).start_at

    client = Client()
    client.force_login(owner)
    page = client.get("/queue/").content.decode()
    assert "expected to start in about" in page
    assert f'datetime="{expected.isoformat()}"' in page

    queue = api_as(outsider).get("/api/v1/queue/").json()
    (entry,) = queue["pending"]
    # Another student's job: its start is as public as its place in line, its name is not.
    assert (entry["job_id"], entry["name"]) == (None, "")
    assert entry["estimated_start"] is not None
    assert queue["running"][0]["estimated_start"] is None


def test_a_job_that_started_before_its_first_forecast_is_not_scored(owner, db):  # type: ignore[no-untyped-def]
    # It started at once, was preempted, and its first forecast came in its second wait:
    # scored, it would count as a wait of 0 (every range would start "now").
    now = timezone.now()
    _scored_jobs(owner, ratios=[1.0] * 20, now=now)
    made = now - timedelta(hours=1)
    early = JobFactory(
        owner=owner, state=JobState.SUCCEEDED, first_started_at=made - timedelta(minutes=5)
    )
    StartForecast.objects.create(
        job=early, made_at=made, first_made_at=made, first_start_at=made + timedelta(hours=1)
    )
    accuracy = start_forecast_accuracy(now=now)
    assert accuracy is not None
    assert (accuracy.samples, accuracy.low) == (20, 1.0)


def test_the_measured_accuracy_is_kept_for_the_pages(owner, cluster):  # type: ignore[no-untyped-def]
    now = timezone.now()
    _scored_jobs(owner, ratios=[0.5] * 10 + [2.0] * 10 + [1.0] * 20, now=now)
    _, waiting = _running_and_waiting(owner, running_walltime=3600)
    start_forecasts_refresh(now=timezone.now())
    score = StartForecastScore.objects.get()
    assert score.samples == 40
    client = Client()
    client.force_login(owner)
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "Of 40 jobs told of a wait over the last 30 days" in page
    assert "the likely range above" in page
    # Forecasts scored away (older than 30 days): the kept score goes too.
    start_forecasts_refresh(now=now + timedelta(days=40))
    assert not StartForecastScore.objects.exists()


def test_a_job_requeued_after_the_snapshot_is_not_called_held(owner, cluster, monkeypatch):  # type: ignore[no-untyped-def]
    from scheduler import forecast_services

    running = _submit(owner, walltime_seconds=600)
    scheduling_round_run()
    snapshot_read = forecast_services.snapshot_build

    def requeued_meanwhile(*, now, settings):  # type: ignore[no-untyped-def]
        read = snapshot_read(now=now, settings=settings)
        Job.objects.filter(pk=running.pk).update(
            state=JobState.PENDING, pending_since=now + timedelta(seconds=1)
        )
        return read

    monkeypatch.setattr(forecast_services, "snapshot_build", requeued_meanwhile)
    start_forecasts_refresh(now=timezone.now())
    assert not StartForecast.objects.filter(job=running).exists()


def test_a_forecast_from_before_the_current_wait_is_not_shown(owner, cluster):  # type: ignore[no-untyped-def]
    _, waiting = _running_and_waiting(owner)
    now = timezone.now()
    start_forecasts_refresh(now=now)
    job = Job.objects.select_related("start_forecast").get(pk=waiting.pk)
    assert start_forecast_of(job) is not None
    job.pending_since = now + timedelta(seconds=5)  # requeued after the forecast
    assert start_forecast_of(job) is None


def test_a_job_resuming_from_a_checkpoint_spends_the_restore_cost_of_its_walltime(  # type: ignore[no-untyped-def]
    owner, cluster
):
    resumed = JobFactory(owner=owner, walltime_seconds=1000, total_run_seconds=400.0)
    fresh = JobFactory(owner=owner, walltime_seconds=1000)
    settings = scheduler_settings_from(scheduler_config_get())
    snapshot, _ = snapshot_build(now=timezone.now(), settings=settings)
    work = _work_left(snapshot, now=timezone.now())
    assert work[resumed.pk] == 1000 - 400 - settings.restore_cost
    assert work[fresh.pk] == 1000


def test_the_queue_leaves_out_a_forecast_from_before_the_current_wait(owner, cluster, api_as):  # type: ignore[no-untyped-def]
    _, waiting = _running_and_waiting(owner)
    now = timezone.now()
    start_forecasts_refresh(now=now)
    Job.objects.filter(pk=waiting.pk).update(pending_since=now + timedelta(seconds=5))
    (entry,) = api_as(owner).get("/api/v1/queue/").json()["pending"]
    assert entry["estimated_start"] is None
