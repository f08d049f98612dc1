"""Rounds racing submissions, cancellations and completions from several threads.

After every round the rows are checked: no device held twice, no job holding devices
in two attempts, holding states ⇔ live allocations, every job in exactly one state.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from config.errors import ApplicationError
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import JobSpec, job_cancel, job_finish, job_submit
from scheduler.choices import RoundOutcome
from scheduler.models import SchedulingRound
from scheduler.services import scheduling_round_run
from tests.scheduler.livefixtures import assert_consistent, configure, simulated_cluster

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 200
MAX_PENDING = 60


def _submit(user, rng: random.Random) -> None:
    spec = JobSpec(
        image="pytorch/pytorch:2.4.0",
        command=["sleep", "60"],
        num_gpus=rng.choice([1, 1, 2, 4, 8]),
        consolidation=rng.choice(["required", "preferred", "any"]),
    )
    job_submit(owner=user, spec=spec)


@pytest.mark.django_db(transaction=True)
def test_random_interleavings_never_break_the_invariants(owner, teammate, outsider):
    configure(
        placement="best-fit", queue_thresholds=[30.0], min_runtime_seconds=0.0, promote_knob=2.0
    )
    simulated_cluster(nodes=3, gpus_per_node=8)
    users = [owner, teammate, outsider]
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        """Submit, cancel and finish jobs at random until the rounds are done."""
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                stop.wait(0.002)  # interleave with rounds rather than flood the queue
                action = rng.random()
                if action < 0.5:
                    if Job.objects.filter(state=JobState.PENDING).count() < MAX_PENDING:
                        _submit(rng.choice(users), rng)
                    continue
                states = (
                    [JobState.PENDING, JobState.RUNNING]
                    if action < 0.7
                    else [JobState.RUNNING, JobState.STARTING]
                )
                job = (
                    Job.objects.filter(state__in=states)
                    .order_by("?")
                    .select_related("owner")
                    .first()
                )
                if job is None:
                    continue
                try:
                    if action < 0.7:
                        job_cancel(job_id=job.pk, by=job.owner)
                    else:
                        job_finish(job_id=job.pk, exit_code=rng.choice([0, 0, 1]))
                except ApplicationError:
                    pass  # lost a race to a round or another thread: that is the point
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=churn, args=(seed,)) for seed in range(3)]
    for worker in workers:
        worker.start()
    try:
        for _ in range(ROUNDS):
            scheduling_round_run()
            # The simulated agent would mark started jobs running; requeue the preempted.
            for job_id in Job.objects.filter(state=JobState.PREEMPTING).values_list(
                "id", flat=True
            ):
                try:
                    from jobs.services import job_requeue

                    job_requeue(job_id=job_id, message="checkpointed")
                except ApplicationError:
                    pass
            assert_consistent()
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert not errors, errors
    assert_consistent()
    applied = SchedulingRound.objects.filter(outcome=RoundOutcome.APPLIED)
    assert applied.count() == ROUNDS
    assert sum(applied.values_list("starts", flat=True)) > 20  # the churn really ran jobs
    assert Job.objects.count() > 50


KILLER = textwrap.dedent(
    """
    import os, signal, django
    django.setup()
    import jobs.services as job_services
    import scheduler.services as round_services

    calls = {"n": 0}
    real_start = job_services.job_start

    def start_then_die(**kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # two starts written, inside the round's open transaction
            os.kill(os.getpid(), signal.SIGKILL)
        return real_start(**kwargs)

    round_services.job_start = start_then_die
    round_services.scheduling_round_run()
    """
)


@pytest.mark.django_db(transaction=True)
def test_a_process_killed_mid_round_leaves_the_database_consistent(owner):
    configure(placement="best-fit")
    simulated_cluster(nodes=1, gpus_per_node=8)
    jobs = [
        job_submit(owner=owner, spec=JobSpec(image="ubuntu", command=["sleep", "60"], num_gpus=1))
        for _ in range(5)
    ]
    database = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
    }
    result = subprocess.run(
        [sys.executable, "-c", KILLER],
        cwd=ROOT,
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    # Nothing of the killed round was committed, and its advisory lock died with it.
    assert not Allocation.objects.exists()
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.PENDING}
    assert_consistent()
    scheduling_round = scheduling_round_run()
    assert scheduling_round.outcome == RoundOutcome.APPLIED
    assert scheduling_round.starts == len(jobs)
    assert_consistent()
