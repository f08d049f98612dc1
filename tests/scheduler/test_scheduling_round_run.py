"""One scheduling round against the real database: snapshot → decide → apply."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.utils import timezone

from agents.simulated import simulated_tick
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Allocation, Job, JobEvent
from jobs.services import JobSpec, job_cancel, job_submit
from scheduler import services as round_services
from scheduler.choices import RoundOutcome
from scheduler.core.types import SchedulerSettings
from scheduler.locks import ROUND_LOCK_KEY
from scheduler.models import SchedulingRound
from scheduler.policies.las import spell_start
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.services import scheduling_round_run
from scheduler.snapshot import snapshot_build
from tests.scheduler.livefixtures import (
    age_job,
    assert_consistent,
    configure,
    configure_tiresias_rules,
    simulated_cluster,
)


def submit(user, gpus: int, seconds: int = 600) -> Job:
    return job_submit(
        owner=user,
        spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", str(seconds)], num_gpus=gpus),
    )


@pytest.fixture
def cluster(db):
    configure_tiresias_rules()
    return simulated_cluster(nodes=1, gpus_per_node=4)


@pytest.mark.django_db
def test_a_round_starts_what_fits_and_explains_what_waits(owner, outsider, cluster):
    first, second = submit(owner, 3), submit(outsider, 2)
    scheduling_round = scheduling_round_run()
    assert scheduling_round.outcome == RoundOutcome.APPLIED
    assert (scheduling_round.starts, scheduling_round.holds) == (1, 1)
    first.refresh_from_db()
    second.refresh_from_db()
    # The simulated agent marked the started job RUNNING after the round committed.
    assert first.state in {JobState.STARTING, JobState.RUNNING}
    assert first.allocations.filter(ended_at__isnull=True).count() == 3
    assert second.state == JobState.PENDING
    assert second.queue_position == 1
    assert second.reason.split(":")[0] in {"Behind", "WaitingForResources"}
    assert_consistent()


@pytest.mark.django_db
def test_cancelling_frees_the_devices_for_the_next_round(owner, outsider, cluster):
    first, second = submit(owner, 4), submit(outsider, 4)
    scheduling_round_run()
    job_cancel(job_id=first.pk, by=owner)
    assert not Allocation.objects.filter(job=first, ended_at__isnull=True).exists()
    scheduling_round_run()
    second.refresh_from_db()
    assert second.state in {JobState.STARTING, JobState.RUNNING}
    assert_consistent()


@pytest.mark.django_db
def test_a_higher_queue_job_preempts_a_lower_one_which_keeps_its_service(owner, outsider, cluster):
    """The running job has used 2 h × 4 GPUs (queue 1); a new job (queue 0) takes its GPUs."""
    # Longer than its 2 h: a simulated job whose work is done exits even while preempted.
    veteran = submit(owner, 4, seconds=86_400)
    scheduling_round_run()
    simulated_tick(grace_seconds=0)
    age_job(veteran.pk, seconds=7200)  # past min_runtime, 28,800 GPU·s: queue 1
    newcomer = submit(outsider, 4)

    preempting_round = scheduling_round_run()
    veteran.refresh_from_db()
    assert preempting_round.preemptions == 1
    assert veteran.state == JobState.PREEMPTING
    assert f"job #{newcomer.pk}" in veteran.reason
    assert "queue" in veteran.reason.lower()
    newcomer.refresh_from_db()
    assert newcomer.state == JobState.PENDING
    assert "checkpointing" in newcomer.reason  # waits for the grace period, not the index

    simulated_tick(grace_seconds=0)  # the checkpoint is taken: back in the queue
    veteran.refresh_from_db()
    assert veteran.state == JobState.PENDING
    assert veteran.preemption_count == 1
    assert veteran.attained_service == pytest.approx(4 * 7200, rel=0.01)

    scheduling_round_run()
    newcomer.refresh_from_db()
    assert newcomer.state in {JobState.STARTING, JobState.RUNNING}
    preempted_event = JobEvent.objects.filter(job=veteran, to_state=JobState.PREEMPTING).get()
    assert f"job #{newcomer.pk}" in preempted_event.message
    assert_consistent()


@pytest.mark.django_db
def test_a_job_inside_its_minimum_runtime_is_not_preempted(owner, outsider, cluster):
    veteran = submit(owner, 4)
    scheduling_round_run()
    Job.objects.filter(pk=veteran.pk).update(service_since_promotion=10**6)  # queue 1 already
    submit(outsider, 4)
    assert scheduling_round_run().preemptions == 0
    veteran.refresh_from_db()
    assert veteran.state in {JobState.STARTING, JobState.RUNNING}


@pytest.mark.django_db
def test_attained_service_accrues_from_the_allocation_and_survives_a_restart(owner, cluster):
    """Nothing is kept in memory: the next process reads service from the rows."""
    job = submit(owner, 2)
    scheduling_round_run()
    age_job(job.pk, seconds=100)
    from jobs.services import job_finish

    simulated_tick(grace_seconds=0)
    job_finish(job_id=job.pk, exit_code=0)
    job.refresh_from_db()
    assert job.attained_service == pytest.approx(200, rel=0.02)
    assert job.total_run_seconds == pytest.approx(100, rel=0.02)
    owner.refresh_from_db()
    assert owner.usage == pytest.approx(200, rel=0.02)


@pytest.mark.django_db
def test_a_demoted_job_moves_queue_in_the_database(owner, cluster):
    configure(placement="best-fit", queue_thresholds=[100.0], min_runtime_seconds=0)
    job = submit(owner, 1)
    scheduling_round_run()
    age_job(job.pk, seconds=200)
    assert scheduling_round_run().queue_changes == 1
    job.refresh_from_db()
    assert job.queue_level == 1
    # It entered queue 1 when its service crossed 100 GPU-s (~100 s ago at speed 1), not
    # when this round noticed: the FIFO key inside the queue does not depend on the timer.
    speed = Allocation.objects.get(job=job).device.device_type.speed
    crossed_ago = (timezone.now() - job.queue_entered_at).total_seconds()
    assert crossed_ago == pytest.approx(200 - 100 / speed, abs=5)


@pytest.mark.django_db
def test_a_start_that_no_longer_holds_is_dropped_and_logged(owner, cluster, monkeypatch):
    job = submit(owner, 1)
    real_decide = round_services.decide

    def decide_then_cancel(snapshot):
        decisions = real_decide(snapshot)
        Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # raced by a user
        return decisions

    monkeypatch.setattr(round_services, "decide", decide_then_cancel)
    scheduling_round = scheduling_round_run()
    assert scheduling_round.starts == 0
    assert scheduling_round.dropped[0]["job"] == job.pk
    assert not Allocation.objects.exists()


@pytest.mark.django_db
def test_the_settings_an_admin_stores_are_used_by_the_next_round(owner, cluster):
    configure(policy="fifo", placement="best-fit", queue_thresholds=[10.0, 20.0], fairness=0.5)
    submit(owner, 1)
    scheduling_round = scheduling_round_run()
    assert scheduling_round.policy == "fifo"
    assert scheduling_round.settings["queue_thresholds"] == [10.0, 20.0]
    assert scheduling_round.settings["fairness"] == 0.5


@pytest.mark.django_db
def test_the_stored_defaults_are_the_policy_defaults():
    assert scheduler_settings_from(scheduler_config_get()) == SchedulerSettings()


@pytest.mark.django_db
def test_the_churn_control_settings_reach_the_policy():
    configure(
        preempt_patience_seconds=120.0,
        preempt_margin=2,
        max_victims=0,
        starvation_seconds=0.0,
        allox_efficiency_gate=0.0,
    )
    settings = scheduler_settings_from(scheduler_config_get())
    assert (
        settings.preempt_patience,
        settings.preempt_margin,
        settings.max_victims,
        settings.starvation_seconds,
        settings.allox_efficiency_gate,
    ) == (120.0, 2, 0, 0.0, 0.0)


@pytest.mark.django_db
def test_the_snapshot_gives_a_pending_job_the_start_of_its_wait_and_a_running_job_none(
    owner, outsider, cluster
):
    running = submit(owner, 4)
    scheduling_round_run()
    simulated_tick(grace_seconds=0)
    pending = submit(outsider, 4)
    age_job(pending.pk, seconds=900)
    stale = submit(outsider, 1)
    # A pending row without the column set passes None; the policy counts from submission
    # then (las.spell_start).
    Job.objects.filter(pk=stale.pk).update(pending_since=None)

    snapshot, _ = snapshot_build(now=timezone.now(), settings=SchedulerSettings())

    pending.refresh_from_db()
    stale.refresh_from_db()
    views = snapshot.job_by_id
    assert views[running.pk].pending_since is None
    assert views[pending.pk].pending_since == pytest.approx(pending.pending_since.timestamp())
    assert views[pending.pk].pending_since == pytest.approx(time.time() - 900, abs=5)
    assert views[stale.pk].pending_since is None
    assert spell_start(views[stale.pk]) == pytest.approx(stale.submitted_at.timestamp())


@pytest.mark.django_db
def test_on_a_cluster_with_real_nodes_every_job_is_placed_on_one_node(owner, small_cluster):
    # The SSH launcher starts a job on one node only: a job spread over two nodes would
    # launch on the first and be found unknown (and requeued) on the second.
    job = job_submit(
        owner=owner,
        spec=JobSpec(image="busybox", command=["true"], num_gpus=2, consolidation="any"),
    )
    Node.objects.update(simulated=True)
    demo, _ = snapshot_build(now=timezone.now(), settings=SchedulerSettings())
    Node.objects.filter(name="v0").update(simulated=False)
    real, _ = snapshot_build(now=timezone.now(), settings=SchedulerSettings())

    assert demo.job_by_id[job.pk].consolidation.value == "any"
    assert real.job_by_id[job.pk].consolidation.value == "required"
    assert job.consolidation == "any"  # what the user asked for is kept


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("queue_thresholds", [100, 50]),
        ("queue_thresholds", "3600"),
        ("queue_thresholds", [-1]),
        ("fairness", 2.0),
        ("policy", "srtf"),
        ("placement", "magic"),
        ("promote_knob", -1.0),
        ("allox_alpha", 0.0),
        ("preempt_margin", 0),
        ("preempt_patience_seconds", -1.0),
        ("starvation_seconds", -1.0),
        ("max_victims", -1),
        ("allox_efficiency_gate", 1.5),
        ("allox_efficiency_gate", -0.1),
    ],
)
@pytest.mark.django_db
def test_bad_settings_are_refused_with_the_field_named(field, value):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as caught:
        configure(**{field: value})
    assert field in caught.value.message_dict


@pytest.mark.django_db(transaction=True)
def test_a_round_that_cannot_take_the_lock_says_so_and_changes_nothing(owner, cluster):
    submit(owner, 1)
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ROUND_LOCK_KEY])
            assert cursor.fetchone()[0]
        scheduling_round = scheduling_round_run()
        assert scheduling_round.outcome == RoundOutcome.LOCKED
        assert not Allocation.objects.exists()
    finally:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ROUND_LOCK_KEY])
        holder.close()
    assert scheduling_round_run().outcome == RoundOutcome.APPLIED


@pytest.mark.django_db(transaction=True)
def test_two_rounds_started_together_never_both_apply(owner, cluster, monkeypatch):
    submit(owner, 1)
    real_decide = round_services.decide

    def slow_decide(snapshot):
        time.sleep(0.5)  # hold the lock long enough for the other round to arrive
        return real_decide(snapshot)

    monkeypatch.setattr(round_services, "decide", slow_decide)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def run_round() -> None:
        barrier.wait()
        try:
            outcomes.append(scheduling_round_run().outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=run_round) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [RoundOutcome.APPLIED, RoundOutcome.LOCKED]
    assert SchedulingRound.objects.filter(outcome=RoundOutcome.APPLIED).get().starts == 1
    assert_consistent()


@pytest.mark.django_db(transaction=True)
def test_a_failed_launch_request_neither_stops_the_others_nor_loses_the_round(
    owner, cluster, monkeypatch
):
    """Dispatch runs after commit: a broker blip on one `.delay()` used to raise out of the
    round, so the later launches were never sent and no round was recorded."""
    from agents import services as agent_services

    jobs = [submit(owner, 1) for _ in range(3)]
    real_launch = agent_services.agent_launch_request
    requested: list[int] = []

    def first_one_fails(*, job_id: int, attempt: int) -> None:
        requested.append(job_id)
        if len(requested) == 1:
            raise ConnectionError("broker blip")
        real_launch(job_id=job_id, attempt=attempt)

    monkeypatch.setattr(agent_services, "agent_launch_request", first_one_fails)
    scheduling_round = scheduling_round_run()

    assert scheduling_round.outcome == RoundOutcome.APPLIED
    assert scheduling_round.starts == 3
    assert sorted(requested) == sorted(job.pk for job in jobs)
    assert SchedulingRound.objects.filter(pk=scheduling_round.pk).exists()


@pytest.mark.django_db
def test_an_admin_changes_the_live_settings_in_the_admin_and_bad_values_are_refused(lab_admin):
    from django.test import Client

    configure()
    client = Client()
    client.force_login(lab_admin)
    form = {
        "policy": "gittins", "placement": "best-fit", "queue_thresholds": "[1800, 7200]",
        "promote_knob": "6", "min_runtime_seconds": "60", "restore_cost_seconds": "30",
        "fairness": "0.5", "allox_alpha": "0.5", "allox_window": "50",
        "round_interval_seconds": "5", "preemption_grace_seconds": "10",
        "preempt_patience_seconds": "600", "preempt_margin": "3", "max_victims": "1",
        "starvation_seconds": "3600", "allox_efficiency_gate": "0.5",
        "idle_threshold_pct": "5", "idle_window_minutes": "60", "idle_grace_minutes": "60",
        "session_idle_minutes": "120",
    }  # fmt: skip
    response = client.post("/admin/scheduler/schedulerconfig/1/change/", form)
    assert response.status_code == 302
    settings = scheduler_settings_from(scheduler_config_get())
    assert (settings.policy, settings.queue_thresholds, settings.promote_knob) == (
        "gittins",
        (1800.0, 7200.0),
        6.0,
    )
    bad = client.post(
        "/admin/scheduler/schedulerconfig/1/change/", {**form, "queue_thresholds": "[7200, 1800]"}
    )
    assert bad.status_code == 200
    assert "strictly ascending" in bad.content.decode()
    assert scheduler_config_get().queue_thresholds == [1800, 7200]
    # The admin goes through the audited service, like the settings page.
    from accounts.models import AuditEntry

    audited = set(
        AuditEntry.objects.filter(target_kind="scheduler").values_list("field", flat=True)
    )
    assert {"policy", "queue_thresholds", "promote_knob"} <= audited


@pytest.mark.django_db
def test_a_round_that_raises_is_recorded_as_failed_with_its_error_and_the_error_goes_on(
    owner, cluster, monkeypatch
):
    submit(owner, 1)

    def broken_policy(snapshot):
        raise RuntimeError("policy bug")

    monkeypatch.setattr(round_services, "decide", broken_policy)
    with pytest.raises(RuntimeError, match="policy bug"):
        scheduling_round_run()

    failed = SchedulingRound.objects.get()
    assert failed.outcome == RoundOutcome.FAILED
    assert "RuntimeError: policy bug" in failed.error
    assert "broken_policy" in failed.error  # the traceback, not only the message
    assert not Allocation.objects.exists()
    # The lock was let go: the next round runs (and applies, the policy being fixed).
    monkeypatch.undo()
    assert scheduling_round_run().outcome == RoundOutcome.APPLIED


@pytest.mark.django_db
def test_a_failed_rounds_error_is_kept_bounded(cluster, monkeypatch):
    def broken_policy(snapshot):
        raise RuntimeError("x" * 100_000)

    monkeypatch.setattr(round_services, "decide", broken_policy)
    with pytest.raises(RuntimeError):
        scheduling_round_run()
    error = SchedulingRound.objects.get().error
    assert len(error) == round_services.ROUND_ERROR_CHARS
    assert error.rstrip().endswith("x")  # the tail: the exception itself is kept


@pytest.mark.django_db
def test_the_timer_retries_a_failed_round_only_after_an_interval(cluster, monkeypatch):
    from datetime import timedelta

    from scheduler.selectors import round_is_due
    from scheduler.tasks import scheduling_round_task

    configure(round_interval_seconds=10)
    monkeypatch.setattr(round_services, "decide", lambda snapshot: 1 / 0)
    outcomes = [scheduling_round_task.apply(kwargs={"trigger": "timer"}) for _ in range(3)]

    assert [result.state for result in outcomes] == ["FAILURE", "SUCCESS", "SUCCESS"]
    assert [result.result for result in outcomes[1:]] == [{"round": None, "outcome": "not due"}] * 2
    assert list(SchedulingRound.objects.values_list("outcome", flat=True)) == [RoundOutcome.FAILED]
    SchedulingRound.objects.update(started_at=timezone.now() - timedelta(seconds=11))
    assert round_is_due()


@pytest.mark.django_db
def test_round_records_older_than_the_history_are_pruned():
    from datetime import timedelta

    from scheduler.choices import RoundTrigger
    from scheduler.services import scheduling_rounds_prune

    now = timezone.now()
    for age_days in (31, 30.5, 29, 0):
        SchedulingRound.objects.create(
            started_at=now - timedelta(days=age_days),
            trigger=RoundTrigger.TIMER,
            outcome=RoundOutcome.APPLIED,
        )
    assert scheduling_rounds_prune(now=now, keep_days=30) == 2
    ages = sorted(
        (now - started).days
        for started in SchedulingRound.objects.values_list("started_at", flat=True)
    )
    assert ages == [0, 29]


@pytest.mark.django_db
def test_the_prune_task_keeps_30_days_unless_configured(settings):
    from datetime import timedelta

    from scheduler.choices import RoundTrigger
    from scheduler.tasks import scheduling_rounds_prune_task

    now = timezone.now()
    for age_days in (40, 20):
        SchedulingRound.objects.create(
            started_at=now - timedelta(days=age_days),
            trigger=RoundTrigger.TIMER,
            outcome=RoundOutcome.APPLIED,
        )
    assert scheduling_rounds_prune_task() == 1
    settings.GPULAB_ROUND_HISTORY_DAYS = 7
    assert scheduling_rounds_prune_task() == 1
    assert not SchedulingRound.objects.exists()


def test_housekeeping_runs_daily():
    from celery.schedules import crontab

    from config.celery_app import app

    app.loader.import_default_modules()
    # At a time of day, not every 24 h from beat's start, which each redeploy restarts.
    schedules = {entry["task"]: entry["schedule"] for entry in app.conf.beat_schedule.values()}
    assert schedules["housekeeping.sessions_clear"] == crontab(hour=3, minute=0)
    assert schedules["scheduler.rounds_prune"] == crontab(hour=3, minute=15)
    assert {"housekeeping.sessions_clear", "scheduler.rounds_prune"} <= set(app.tasks)


@pytest.mark.django_db
def test_the_sessions_task_deletes_expired_sessions():
    from datetime import timedelta

    from django.contrib.sessions.models import Session

    from config.celery_app import sessions_clear_task

    now = timezone.now()
    Session.objects.create(session_key="old", session_data="", expire_date=now - timedelta(days=1))
    Session.objects.create(session_key="new", session_data="", expire_date=now + timedelta(days=1))
    sessions_clear_task()
    assert list(Session.objects.values_list("session_key", flat=True)) == ["new"]
