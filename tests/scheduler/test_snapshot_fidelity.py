"""What the live snapshot tells the policy: quotas of jobs being stopped, a retry's pending
spell, decayed usage of long runs, the sizes Gittins learns from, disabled owners."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import User
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import (
    JobSpec,
    job_finish,
    job_mark_running,
    job_preempt,
    job_requeue,
    job_start,
    job_submit,
)
from scheduler.core.types import Snapshot
from scheduler.policies.las import starving_jobs
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.services import scheduling_round_run
from scheduler.snapshot import OWNER_DISABLED_REASON, RoundContext, snapshot_build
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory
from tests.scheduler.livefixtures import age_job, configure

DAY = 86_400.0
WEEK = 7 * DAY  # GPULAB_USAGE_HALF_LIFE_HOURS' default, 168 h


def build_with_context() -> tuple[Snapshot, RoundContext]:
    settings = scheduler_settings_from(scheduler_config_get())
    return snapshot_build(now=timezone.now(), settings=settings)


def build() -> Snapshot:
    return build_with_context()[0]


def v100s(count: int, *, node: str = "n0") -> list[int]:
    v100 = DeviceTypeFactory(name="v100", speed=1.0)
    host = NodeFactory(name=node, simulated=True)
    return [DeviceFactory(node=host, index=i, device_type=v100).pk for i in range(count)]


def submit(owner: User, gpus: int = 1, **fields: object) -> Job:
    spec = JobSpec(image="img:1", command=["sleep", "1000000"], num_gpus=gpus, **fields)
    return job_submit(owner=owner, spec=spec)


def run(job: Job, device_ids: list[int]) -> None:
    job_start(job_id=job.pk, device_ids=device_ids)
    job_mark_running(job_id=job.pk)


# ------------------------------------------------------------------ quotas of jobs stopping


@pytest.mark.django_db
def test_a_preempting_jobs_gpu_still_counts_against_its_owners_quota(owner):
    """alice (max 1 GPU) has a job checkpointing on its GPU: her next job waits for it."""
    configure(placement="best-fit", queue_thresholds=[3600.0])
    devices = v100s(2)
    User.objects.filter(pk=owner.pk).update(max_gpus=1)
    first = submit(owner)
    run(first, devices[:1])
    job_preempt(job_id=first.pk, reason="a job of a higher queue")
    second = submit(owner)

    snapshot = build()
    (stopping,) = snapshot.stopping_jobs
    assert (stopping.id, stopping.user, stopping.group, stopping.devices) == (
        first.pk,
        "alice",
        "vision",
        (devices[0],),
    )
    assert first.pk not in snapshot.job_by_id  # still not the policy's to start or preempt

    scheduling_round_run()
    second.refresh_from_db()
    assert second.state == JobState.PENDING
    assert second.reason == "QuotaExceeded: user max GPUs 1"
    assert Allocation.objects.filter(job__owner=owner, ended_at__isnull=True).count() == 1

    job_requeue(job_id=first.pk, message="Checkpointed after preemption; requeued.")
    scheduling_round_run()  # the GPU is back: one of the two runs again
    assert Allocation.objects.filter(job__owner=owner, ended_at__isnull=True).count() == 1


# ------------------------------------------------------------------ a retry's pending spell


@pytest.mark.django_db
def test_a_retrys_backoff_is_not_waiting_and_does_not_make_it_starve(owner, outsider):
    """A 2-GPU job failed and waits out a 1 h backoff while another user's job takes its
    GPUs. When the backoff ends it has waited ~0 s, not an hour: no starvation guard, no
    preemption of the other job, and no hour of δ for the starvation knob."""
    configure(placement="best-fit")  # patience 600 s, margin 3, starvation guard 3600 s
    devices = v100s(2)
    failing = submit(owner, 2, max_retries=10)
    run(failing, devices)
    age_job(failing.pk, seconds=120)
    Job.objects.filter(pk=failing.pk).update(retries_used=6)
    job_finish(job_id=failing.pk, exit_code=3)  # retry 7: a 3600 s backoff
    failing.refresh_from_db()
    assert failing.state == JobState.PENDING
    other = submit(outsider, 2)
    run(other, devices)
    age_job(other.pk, seconds=3 * 3600)  # far past the minimum runtime, queue 4
    # The backoff has just ended: every timestamp of the failed job an hour earlier.
    hour = timedelta(seconds=3601)
    Job.objects.filter(pk=failing.pk).update(
        pending_since=failing.pending_since - hour,
        retry_not_before=failing.retry_not_before - hour,
    )
    failing.refresh_from_db()

    snapshot = build()
    view = snapshot.job_by_id[failing.pk]
    assert view.pending_since == pytest.approx(failing.retry_not_before.timestamp())
    assert snapshot.now - view.pending_since < 60
    assert view.waiting_since_promotion < 60  # not the hour of backoff
    assert failing.pk not in starving_jobs(snapshot)

    scheduling_round_run()
    other.refresh_from_db()
    assert other.state == JobState.RUNNING


# ------------------------------------------------------------------ decayed usage of a run


@pytest.mark.django_db
def test_a_long_runs_usage_decays_each_gpu_second_from_when_it_was_used(owner, settings):
    """14 days on one reference GPU at the 7-day half-life: H/ln 2 × (1 − 2^−2) = 654,406
    GPU-seconds of usage, live and once charged, not the 1,209,600 it ran."""
    settings.GPULAB_USAGE_HALF_LIFE_HOURS = 168
    configure(placement="best-fit", queue_thresholds=[3600.0])
    devices = v100s(1)
    job = submit(owner)
    run(job, devices)
    age_job(job.pk, seconds=14 * DAY)
    expected = WEEK / math.log(2) * (1 - 0.25)
    assert expected == pytest.approx(654_406.5, abs=1)

    live = build().user_by_name["alice"].usage
    job_finish(job_id=job.pk, exit_code=0)
    owner.refresh_from_db()

    assert live == pytest.approx(expected, rel=1e-4)
    assert owner.usage == pytest.approx(expected, rel=1e-4)
    assert owner.lab_groups.get().usage == pytest.approx(expected, rel=1e-4)
    job.refresh_from_db()
    assert job.attained_service == pytest.approx(14 * DAY, rel=1e-4)  # service is not decayed


@pytest.mark.django_db
def test_usage_charged_in_two_runs_adds_up_as_decayed_per_gpu_second(owner, settings):
    """7 days on 2 GPUs, preempted, stored usage then ages 7 days: the charge at the
    preemption was 2 × H/ln 2 × ½, and a week later it is half that."""
    settings.GPULAB_USAGE_HALF_LIFE_HOURS = 168
    configure(placement="best-fit", queue_thresholds=[3600.0])
    devices = v100s(2)
    job = submit(owner, 2)
    run(job, devices)
    age_job(job.pk, seconds=WEEK)
    job_preempt(job_id=job.pk, reason="test")
    job_requeue(job_id=job.pk, message="requeued")
    owner.refresh_from_db()
    charged = 2 * WEEK / math.log(2) * 0.5
    assert owner.usage == pytest.approx(charged, rel=1e-4)

    User.objects.filter(pk=owner.pk).update(
        usage_updated_at=owner.usage_updated_at - timedelta(seconds=WEEK)
    )
    assert build().user_by_name["alice"].usage == pytest.approx(charged / 2, rel=1e-4)


# ------------------------------------------------------------------ Gittins' job sizes


@pytest.mark.django_db
def test_every_job_that_left_after_running_feeds_the_size_distribution(owner):
    """A job's size is the service it got before it left, however it left."""
    now = timezone.now()

    def ended(state: JobState, service: float, minutes_ago: int, **fields: object) -> None:
        finished_at = now - timedelta(minutes=minutes_ago)
        JobFactory(
            owner=owner,
            state=state,
            attained_service=service,
            finished_at=finished_at,
            **fields,
        )

    ended(JobState.SUCCEEDED, 100.0, 50)
    ended(JobState.FAILED, 57_600.0, 40, reason="Walltime exceeded: ran 2:00:00 of its limit.")
    ended(JobState.CANCELLED, 50_000.0, 30)
    ended(JobState.FAILED, 300.0, 20, exit_code=1)
    ended(JobState.CANCELLED, 0.0, 10)  # cancelled before it ran: says nothing about sizes
    JobFactory(owner=owner, state=JobState.PENDING, attained_service=900.0)  # not ended

    assert build().finished_job_sizes == (100.0, 57_600.0, 50_000.0, 300.0)  # oldest first


# ------------------------------------------------------------------ disabled owners


@pytest.mark.django_db
def test_a_disabled_owners_pending_jobs_are_held_and_running_ones_run_on(owner, outsider):
    configure(placement="best-fit")
    devices = v100s(4)
    running = submit(owner, 2)
    run(running, devices[:2])
    waiting = submit(owner, 1)
    other = submit(outsider, 1)
    User.objects.filter(pk=owner.pk).update(is_active=False)

    snapshot, context = build_with_context()
    assert waiting.pk not in snapshot.job_by_id
    assert running.pk in snapshot.job_by_id  # still holds its GPUs, counted in usage
    assert context.left_out_reasons == {waiting.pk: OWNER_DISABLED_REASON}
    assert OWNER_DISABLED_REASON == "OwnerDisabled: the owner's account is disabled"

    scheduling_round_run()
    waiting.refresh_from_db()
    running.refresh_from_db()
    other.refresh_from_db()
    assert waiting.state == JobState.PENDING  # two GPUs are free, yet it does not start
    assert (waiting.reason, waiting.queue_position) == (OWNER_DISABLED_REASON, None)
    assert running.state == JobState.RUNNING
    assert other.state in {JobState.STARTING, JobState.RUNNING}

    # Once stored, the reason is not written again every round.
    assert build_with_context()[1].left_out_reasons == {}
    # Enabled again, the job is the policy's once more.
    User.objects.filter(pk=owner.pk).update(is_active=True)
    assert waiting.pk in build().job_by_id
