"""Every transition of the job state machine, legal and illegal, and the race rule."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from config.errors import IllegalTransition
from jobs import services
from jobs.choices import HOLDING_STATES, TRANSITIONS, EventActor, JobState
from jobs.models import Allocation, Job, JobEvent
from jobs.services import (
    job_cancel,
    job_finish,
    job_launch_failed,
    job_mark_lost,
    job_mark_running,
    job_preempt,
    job_requeue,
    job_start,
    job_transition,
)
from tests.factories import JobFactory

ALL_PAIRS = [(source, target) for source in JobState for target in JobState]
LEGAL = [(s, t) for s, t in ALL_PAIRS if t in TRANSITIONS[s]]
ILLEGAL = [(s, t) for s, t in ALL_PAIRS if t not in TRANSITIONS[s]]


def test_the_table_is_the_one_in_the_issue():
    expected = {
        (JobState.PENDING, JobState.STARTING),
        (JobState.STARTING, JobState.RUNNING),
        (JobState.RUNNING, JobState.SUCCEEDED),
        (JobState.RUNNING, JobState.FAILED),
        (JobState.RUNNING, JobState.CANCELLED),
        (JobState.RUNNING, JobState.PREEMPTING),
        (JobState.PREEMPTING, JobState.PENDING),
        (JobState.RUNNING, JobState.LOST),
        (JobState.STARTING, JobState.LOST),
        (JobState.LOST, JobState.PENDING),
        (JobState.LOST, JobState.FAILED),
        # cancel from any non-terminal state
        (JobState.PENDING, JobState.CANCELLED),
        (JobState.STARTING, JobState.CANCELLED),
        (JobState.PREEMPTING, JobState.CANCELLED),
        (JobState.LOST, JobState.CANCELLED),
        # documented additions: a failed launch, and an exit during the grace period
        (JobState.STARTING, JobState.FAILED),
        (JobState.PREEMPTING, JobState.SUCCEEDED),
        (JobState.PREEMPTING, JobState.FAILED),
        # a failed attempt retried (max_retries)
        (JobState.RUNNING, JobState.PENDING),
    }
    assert set(LEGAL) == expected


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), LEGAL, ids=lambda s: s.value)
def test_it_allows_each_legal_transition_and_records_an_event(source, target, owner):
    job = JobFactory(owner=owner, state=source)
    changed = job_transition(job_id=job.pk, to_state=target, actor=EventActor.SYSTEM, message="t")
    assert changed.state == target
    event = JobEvent.objects.get(job=job)
    assert (event.from_state, event.to_state, event.message) == (source, target, "t")


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), ILLEGAL, ids=lambda s: s.value)
def test_it_refuses_each_illegal_transition_and_changes_nothing(source, target, owner):
    job = JobFactory(owner=owner, state=source)
    with pytest.raises(IllegalTransition):
        job_transition(job_id=job.pk, to_state=target, actor=EventActor.SYSTEM)
    job.refresh_from_db()
    assert job.state == source
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_the_full_lifecycle_through_the_named_services(owner, small_cluster):
    job = JobFactory(owner=owner, num_gpus=2)
    devices = [small_cluster[0].pk, small_cluster[1].pk]
    job = job_start(job_id=job.pk, device_ids=devices)
    assert (job.state, job.attempt) == (JobState.STARTING, 1)
    assert set(
        Allocation.objects.filter(job=job, ended_at__isnull=True).values_list(
            "device_id", flat=True
        )
    ) == set(devices)
    job = job_mark_running(job_id=job.pk)
    job = job_preempt(job_id=job.pk, reason="a queue-0 job needs the GPUs", by_job_id=99)
    assert job.state == JobState.PREEMPTING and "job #99" in job.reason
    job = job_requeue(job_id=job.pk, message="Checkpointed; back in the queue.")
    assert (job.state, job.preemption_count) == (JobState.PENDING, 1)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    job = job_start(job_id=job.pk, device_ids=devices)
    assert job.attempt == 2
    job = job_mark_running(job_id=job.pk)
    job = job_finish(job_id=job.pk, exit_code=0)
    assert (job.state, job.exit_code) == (JobState.SUCCEEDED, 0)
    assert job.finished_at is not None
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    assert list(JobEvent.objects.filter(job=job).values_list("to_state", flat=True)) == [
        "STARTING",
        "RUNNING",
        "PREEMPTING",
        "PENDING",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]


@pytest.mark.django_db
def test_a_nonzero_exit_fails_the_job_with_a_reason(owner):
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    job = job_finish(job_id=job.pk, exit_code=137)
    assert job.state == JobState.FAILED
    assert job.reason == "Exited with code 137."


@pytest.mark.django_db
def test_a_failed_launch_and_a_lost_node_are_recorded(owner):
    launching = JobFactory(owner=owner, state=JobState.STARTING)
    assert (
        job_launch_failed(job_id=launching.pk, message="image not found").state == JobState.FAILED
    )
    running = JobFactory(owner=owner, state=JobState.RUNNING)
    lost = job_mark_lost(job_id=running.pk, message="node v0 stopped answering")
    assert lost.state == JobState.LOST
    requeued = job_requeue(job_id=running.pk, message="requeued after node loss")
    assert (requeued.state, requeued.preemption_count) == (JobState.PENDING, 0)


@pytest.mark.django_db
def test_finish_is_refused_for_a_job_that_never_ran(owner):
    job = JobFactory(owner=owner, state=JobState.PENDING)
    with pytest.raises(IllegalTransition):
        job_finish(job_id=job.pk, exit_code=0)


@pytest.mark.django_db
def test_cancel_ends_the_live_allocations(owner, small_cluster):
    job = JobFactory(owner=owner)
    job_start(job_id=job.pk, device_ids=[small_cluster[0].pk])
    job_cancel(job_id=job.pk, by=owner)
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_cancel_that_a_round_overtakes_is_retried_not_refused(owner, small_cluster, monkeypatch):
    # The round starts the job between the cancel's read and its update: before, the user
    # got 409 "changed state concurrently" and had to cancel again.
    job = JobFactory(owner=owner)
    real_transition = services.job_transition
    raced = []

    def round_starts_it_first(**kwargs):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(True)
            job_start(job_id=job.pk, device_ids=[small_cluster[0].pk])
        return real_transition(**kwargs)

    monkeypatch.setattr(services, "job_transition", round_starts_it_first)

    cancelled = job_cancel(job_id=job.pk, by=owner)

    assert cancelled.state == JobState.CANCELLED
    # It held a GPU when cancelled: busy until the node poll confirms the process is gone.
    assert Allocation.objects.get(job=job).released_at is None


@pytest.mark.django_db
def test_cancelling_an_ended_job_is_refused(owner):
    job = JobFactory(owner=owner, state=JobState.SUCCEEDED)
    with pytest.raises(IllegalTransition):
        job_cancel(job_id=job.pk, by=owner)


@pytest.mark.django_db(transaction=True)
def test_when_workers_race_exactly_one_transition_wins(owner):
    """Eight threads try to move the same PENDING job out of PENDING at once; one wins.

    Each pins the source state it read (`expected`), as the scheduler does when it claims
    a pending job; the losers see IllegalTransition rather than overwriting the winner.
    """
    job = JobFactory(owner=owner, state=JobState.PENDING)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def attempt(target: JobState) -> None:
        barrier.wait()
        try:
            job_transition(
                job_id=job.pk,
                to_state=target,
                actor=EventActor.SYSTEM,
                expected=frozenset({JobState.PENDING}),
            )
            outcomes.append("won")
        except IllegalTransition:
            outcomes.append("lost")
        finally:
            connection.close()

    targets = [JobState.CANCELLED, JobState.STARTING] * 4
    threads = [threading.Thread(target=attempt, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert JobEvent.objects.filter(job_id=job.pk).count() == 1


def test_holding_states_are_the_ones_with_devices():
    assert {JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING} == HOLDING_STATES
    assert Job._meta.get_field("state").default == JobState.PENDING
