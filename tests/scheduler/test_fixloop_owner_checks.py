"""A round starts nothing for an owner whose account was disabled, or who left the job's
group, even when that happened between its snapshot and its apply; a pending job whose
owner left its group is held with its own reason, while running ones run on."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from accounts.models import LabGroup, User
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_mark_running, job_start, job_submit
from scheduler import services as round_services
from scheduler.models import SchedulingRound
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.services import scheduling_round_run
from scheduler.snapshot import not_a_member_reason, snapshot_build
from tests.scheduler.livefixtures import configure, simulated_cluster


def _submit(owner: User, gpus: int = 1) -> Job:
    return job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=gpus))


def _after_the_decision(monkeypatch: Any, change: Any) -> None:
    """`change` happens once the round has decided, before it applies."""
    real = round_services.decide

    def decide_then_change(snapshot):  # type: ignore[no-untyped-def]
        decisions = real(snapshot)
        change()
        return decisions

    monkeypatch.setattr(round_services, "decide", decide_then_change)


@pytest.mark.django_db(transaction=True)
def test_a_start_whose_owner_was_disabled_after_the_snapshot_is_dropped(
    owner: User, monkeypatch: Any
) -> None:
    simulated_cluster(nodes=1, gpus_per_node=1)
    job = _submit(owner)
    _after_the_decision(
        monkeypatch, lambda: User.objects.filter(pk=owner.pk).update(is_active=False)
    )

    scheduling_round_run()

    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    (dropped,) = SchedulingRound.objects.latest("started_at").dropped
    assert (dropped["decision"], dropped["job"]) == ("start", job.pk)
    assert dropped["why"] == "its owner's account was disabled"


@pytest.mark.django_db(transaction=True)
def test_a_start_whose_owner_left_its_group_after_the_snapshot_is_dropped(
    owner: User, vision: LabGroup, monkeypatch: Any
) -> None:
    simulated_cluster(nodes=1, gpus_per_node=1)
    job = _submit(owner)
    _after_the_decision(monkeypatch, lambda: vision.members.remove(owner))

    scheduling_round_run()

    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    (dropped,) = SchedulingRound.objects.latest("started_at").dropped
    assert dropped["why"] == "its owner left the job's group"


@pytest.mark.django_db
def test_a_pending_job_whose_owner_left_its_group_is_held_and_draws_nothing_from_it(
    owner: User, teammate: User, vision: LabGroup
) -> None:
    configure(placement="best-fit")
    devices = simulated_cluster(nodes=1, gpus_per_node=4)
    running = _submit(owner)
    job_start(job_id=running.pk, device_ids=[devices[0].pk])
    job_mark_running(job_id=running.pk)
    waiting = _submit(owner)
    teammates = _submit(teammate)
    vision.members.remove(owner)

    settings = scheduler_settings_from(scheduler_config_get())
    snapshot, context = snapshot_build(now=timezone.now(), settings=settings)
    assert waiting.pk not in snapshot.job_by_id
    assert running.pk in snapshot.job_by_id  # running jobs run on
    assert teammates.pk in snapshot.job_by_id
    reason = not_a_member_reason("vision")
    assert context.left_out_reasons == {waiting.pk: reason}
    assert reason.startswith("InvalidAccount: the owner is no longer a member of group vision")

    scheduling_round_run()

    waiting.refresh_from_db()
    assert (waiting.state, waiting.reason, waiting.queue_position) == (
        JobState.PENDING,
        reason,
        None,
    )
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=teammates.pk).state == JobState.STARTING
