"""The reasons and queue positions the apply step writes for jobs it holds back: a start
waiting for a checkpoint, or one dropped because the rows changed after the snapshot."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from agents.simulated import simulated_tick
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import JobSpec, job_start, job_submit
from scheduler.core.types import Decisions, Preempt, Start
from scheduler.policies import decide
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.services import ApplyResult, decisions_apply, scheduling_round_run
from scheduler.snapshot import OWNER_DISABLED_REASON, RoundContext, snapshot_build
from tests.scheduler.livefixtures import (
    age_job,
    assert_consistent,
    configure_tiresias_rules,
    simulated_cluster,
)


def submit(user, gpus: int, seconds: int = 600) -> Job:
    return job_submit(
        owner=user,
        spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", str(seconds)], num_gpus=gpus),
    )


def plan() -> tuple[RoundContext, Decisions, datetime]:
    now = timezone.now()
    snapshot, context = snapshot_build(
        now=now, settings=scheduler_settings_from(scheduler_config_get())
    )
    return context, decide(snapshot), now


def apply(decisions: Decisions, context: RoundContext, now: datetime) -> ApplyResult:
    with transaction.atomic():
        return decisions_apply(decisions=decisions, context=context, now=now)


def queue(*jobs: Job) -> list[tuple[str, int | None]]:
    """Each job's stored (reason, queue position)."""
    stored = {
        pk: (reason, position)
        for pk, reason, position in Job.objects.values_list("pk", "reason", "queue_position")
    }
    return [stored[job.pk] for job in jobs]


@pytest.fixture
def cluster(db):
    configure_tiresias_rules()
    return simulated_cluster(nodes=1, gpus_per_node=4)


@pytest.mark.django_db
def test_the_job_a_checkpoint_is_for_is_first_in_the_queue_and_says_so_all_grace_long(
    owner, outsider, cluster
):
    veteran = submit(owner, 4, seconds=86_400)
    scheduling_round_run()
    simulated_tick(grace_seconds=0)
    age_job(veteran.pk, seconds=7200)  # queue 1, past its minimum runtime
    newcomer = submit(outsider, 4)
    small = submit(outsider, 1)
    checkpointing = (
        f"WaitingForResources: job #{veteran.pk} is checkpointing before it frees its GPUs"
    )

    assert scheduling_round_run().preemptions == 1
    # The newcomer is next: first, and the small job behind it is second, not first.
    assert queue(newcomer, small) == [(checkpointing, 1), ("Behind: 1 job in queue 0", 2)]

    # The rest of the grace period: the policy says only "needs 4 × GPU"; the queue
    # still says which job it waits for.
    assert scheduling_round_run().preemptions == 0
    assert Job.objects.get(pk=veteran.pk).state == JobState.PREEMPTING
    assert queue(newcomer)[0] == (checkpointing, 1)
    assert queue(small)[0][1] == 2
    assert_consistent()


@pytest.mark.django_db
def test_a_start_whose_gpu_was_taken_after_the_snapshot_is_held_with_why_in_its_place(
    owner, outsider, cluster
):
    first = submit(owner, 4)
    second = submit(outsider, 4)
    context, decisions, now = plan()
    assert [start.job_id for start in decisions.starts] == [first.pk]
    assert [(hold.job_id, hold.position) for hold in decisions.holds] == [(second.pk, 1)]
    # Another job took a chosen GPU meanwhile (an admin's start, say).
    intruder = submit(outsider, 1)
    job_start(job_id=intruder.pk, device_ids=[decisions.starts[0].device_ids[0]])

    result = apply(decisions, context, now)

    assert [drop["job"] for drop in result.dropped] == [first.pk]
    (first_reason, first_position), (_, second_position) = queue(first, second)
    assert first_reason.startswith("WaitingForResources: a GPU chosen for it was taken")
    assert (first_position, second_position) == (1, 2)
    assert_consistent()


@pytest.mark.django_db
def test_a_start_whose_victim_could_not_be_preempted_says_which_and_why(owner, outsider, cluster):
    # The veteran holds every GPU but is STARTING (its launch has not reported), and only
    # a RUNNING job can be preempted: the apply step refuses a policy's preemption of it
    # (policies skip starting jobs; the apply step must not rely on it).
    veteran = submit(owner, 4, seconds=86_400)
    devices = tuple(device.pk for device in cluster)
    job_start(job_id=veteran.pk, device_ids=devices)
    newcomer = submit(outsider, 4)
    Job.objects.filter(pk=newcomer.pk).update(reason="Behind: a reason from long ago")
    context, _, now = plan()
    decisions = Decisions(
        starts=(Start(newcomer.pk, devices),),
        preemptions=(Preempt(veteran.pk, "a newer job needs its GPUs", newcomer.pk),),
        order=(newcomer.pk, veteran.pk),
    )

    result = apply(decisions, context, now)

    assert sorted(drop["decision"] for drop in result.dropped) == ["preempt", "start"]
    assert queue(newcomer) == [
        (
            f"WaitingForResources: job #{veteran.pk} could not be preempted for it "
            "(it is starting); the next round decides again",
            1,
        )
    ]
    assert not Allocation.objects.filter(job=newcomer).exists()
    assert_consistent()


@pytest.mark.django_db
def test_a_start_whose_owner_was_disabled_after_the_snapshot_is_held_as_the_next_round_would(
    owner, outsider, cluster
):
    first = submit(owner, 4)
    second = submit(outsider, 4)
    context, decisions, now = plan()
    assert [start.job_id for start in decisions.starts] == [first.pk]
    User.objects.filter(pk=owner.pk).update(is_active=False)

    apply(decisions, context, now)

    # Out of the queue with the reason the next snapshot gives it, not its stale one.
    assert queue(first, second) == [
        (OWNER_DISABLED_REASON, None),
        ("Behind: 1 job in queue 0", 1),
    ]


@pytest.mark.django_db
def test_a_start_cancelled_during_the_round_takes_no_place_in_the_queue(owner, outsider, cluster):
    first = submit(owner, 4)
    second = submit(outsider, 4)
    context, decisions, now = plan()
    # The owner cancels the job the round is about to start.
    Job.objects.filter(pk=first.pk).update(state=JobState.CANCELLED)

    apply(decisions, context, now)

    ((_, second_position),) = queue(second)
    assert second_position == 1  # not 2 behind a job that left the queue


def test_several_jobs_checkpointing_are_each_named_so_a_viewer_sees_none_of_their_ids(
    db, owner, outsider
):
    from jobs.selectors import texts_for_viewer
    from scheduler.services import _checkpointing_reason
    from tests.factories import JobFactory

    a, b, c = (JobFactory(owner=outsider) for _ in range(3))
    reason = _checkpointing_reason([a.pk, b.pk, c.pk], after="; quota rules out a100 (x)")

    assert reason == (
        f"WaitingForResources: job #{a.pk}, job #{b.pk} and job #{c.pk} are checkpointing "
        "before they free their GPUs; quota rules out a100 (x)"
    )
    (seen,) = texts_for_viewer([reason], user=owner)
    assert not any(f"#{job.pk}" in seen for job in (a, b, c))
