"""Through a real Celery worker on the real Redis: API submissions lead to rounds and allocations.

The worker is a subprocess on this test run's own queue, pointed at the test database;
the test process enqueues rounds exactly as production does (on commit, coalesced).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from config.celery_app import SCHEDULER_QUEUE, SSH_QUEUE, queue_name
from jobs.choices import JobState
from jobs.models import Allocation, Job
from scheduler.choices import RoundTrigger
from scheduler.models import SchedulingRound
from tests.scheduler.livefixtures import assert_consistent, configure, simulated_cluster

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = {"image": "pytorch/pytorch:2.4.0", "command": ["sleep", "600"], "num_gpus": 4}

pytestmark = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
    reason="the worker shares the test database, which needs PostgreSQL",
)


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def worker_start(queues: list[str], module: list[str] | None = None) -> subprocess.Popen[str]:
    """A real worker (solo pool: one task at a time) on the test database and this run's
    queues; `module` replaces `-m celery` (a wrapper that patches a task)."""
    database = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": (
            f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
        ),
        "GPULAB_TEST_RUN_ID": settings.TEST_RUN_ID,
    }
    return subprocess.Popen(
        [sys.executable, *(module or ["-m", "celery"]), "-A", "config.celery_app", "worker",
         "--pool", "solo", "--queues", ",".join(queues), "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def worker_stop(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        worker.kill()


@pytest.fixture
def celery_worker(transactional_db) -> Iterator[subprocess.Popen[str]]:  # type: ignore[no-untyped-def]
    """One worker on all of this run's queues (rounds, SSH work, the rest)."""
    worker = worker_start(
        [settings.CELERY_TASK_DEFAULT_QUEUE, queue_name(SCHEDULER_QUEUE), queue_name(SSH_QUEUE)]
    )
    yield worker
    worker_stop(worker)


def test_api_submissions_reach_allocations_through_real_celery_rounds(
    celery_worker, owner, outsider, api_as, settings
):
    settings.GPULAB_SCHEDULER_MODE = "celery"
    configure(placement="best-fit", round_interval_seconds=3600)  # only events trigger rounds
    simulated_cluster(nodes=1, gpus_per_node=4)

    first = api_as(owner).post("/api/v1/jobs/", SUBMIT, format="json").json()
    second = api_as(outsider).post("/api/v1/jobs/", SUBMIT, format="json").json()
    wait_for(
        lambda: Job.objects.get(pk=first["id"]).state == JobState.RUNNING,
        what="the first job to run (round in the worker, launch by the simulated agent)",
    )
    assert Allocation.objects.filter(job_id=first["id"], ended_at__isnull=True).count() == 4
    assert Job.objects.get(pk=second["id"]).state == JobState.PENDING
    assert SchedulingRound.objects.filter(trigger=RoundTrigger.EVENT).exists()

    # Cancelling frees the devices, and the round it triggers gives them to the second job.
    assert api_as(owner).post(f"/api/v1/jobs/{first['id']}/cancel/").status_code == 200
    assert not Allocation.objects.filter(job_id=first["id"], ended_at__isnull=True).exists()
    wait_for(
        lambda: Job.objects.get(pk=second["id"]).state == JobState.RUNNING,
        what="the second job to run after the cancel",
    )
    assert_consistent()


def test_a_burst_of_submissions_is_coalesced_into_a_few_rounds(
    celery_worker, owner, api_as, settings
):
    settings.GPULAB_SCHEDULER_MODE = "celery"
    configure(placement="best-fit", round_interval_seconds=3600)
    simulated_cluster(nodes=1, gpus_per_node=4)
    client = api_as(owner)
    for _ in range(100):
        assert (
            client.post("/api/v1/jobs/", {**SUBMIT, "num_gpus": 1}, format="json").status_code
            == 201
        )
    wait_for(lambda: Job.objects.filter(state=JobState.RUNNING).count() == 4, what="4 jobs running")
    time.sleep(3)  # let any straggling requested round run
    rounds = SchedulingRound.objects.filter(trigger=RoundTrigger.EVENT).count()
    print(f"\n{rounds} event rounds for 100 submissions")
    assert 1 <= rounds <= 10, f"{rounds} rounds for 100 submissions"


def test_a_higher_queue_job_preempts_through_worker_rounds_and_keeps_service(
    celery_worker, owner, outsider, api_as, settings
):
    from agents.simulated import simulated_tick
    from tests.scheduler.livefixtures import age_job

    settings.GPULAB_SCHEDULER_MODE = "celery"
    # Tiresias' preemption rules: the newcomer preempts at once, from one queue above.
    configure(
        placement="best-fit",
        round_interval_seconds=3600,
        queue_thresholds=[3600.0],
        preempt_patience_seconds=0.0,
        preempt_margin=1,
    )
    simulated_cluster(nodes=1, gpus_per_node=4)
    # Longer than its 2 h: a simulated job whose work is done exits even while preempted.
    long_job = {**SUBMIT, "command": ["sleep", "86400"]}
    veteran = api_as(owner).post("/api/v1/jobs/", long_job, format="json").json()["id"]
    wait_for(lambda: Job.objects.get(pk=veteran).state == JobState.RUNNING, what="veteran running")
    age_job(veteran, seconds=7200)  # 28,800 GPU·s: queue 1, past the minimum runtime

    newcomer = api_as(outsider).post("/api/v1/jobs/", SUBMIT, format="json").json()["id"]
    wait_for(lambda: Job.objects.get(pk=veteran).state == JobState.PREEMPTING, what="preemption")
    simulated_tick(grace_seconds=0)  # checkpoint taken: requeue, which requests a round
    wait_for(
        lambda: Job.objects.get(pk=newcomer).state == JobState.RUNNING, what="newcomer running"
    )
    preempted = Job.objects.get(pk=veteran)
    assert preempted.state == JobState.PENDING
    assert preempted.preemption_count == 1
    assert preempted.attained_service == pytest.approx(4 * 7200, rel=0.01)
    assert_consistent()


def test_a_round_runs_while_every_ssh_slot_is_busy_with_a_long_stop(transactional_db, settings):
    """Rounds have their own queue and worker: stops that wait out a grace period (up to an
    hour) on the SSH worker do not delay them, as they did when both shared one queue."""
    import redis
    from django.core.cache import cache

    from agents.tasks import agent_stop_task
    from scheduler.triggers import REQUEST_KEY, round_request
    from tests.scheduler.blocking_ssh_worker import stop_keys

    settings.GPULAB_SCHEDULER_MODE = "celery"
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    started, done, release = stop_keys(settings.TEST_RUN_ID)
    client.delete(started, done, release)
    cache.delete(REQUEST_KEY)
    # As docker-compose.yml runs them: rounds alone; SSH work with the default queue.
    rounds = worker_start([queue_name(SCHEDULER_QUEUE)])
    ssh = worker_start(
        [queue_name(SSH_QUEUE), settings.CELERY_TASK_DEFAULT_QUEUE],
        module=["-m", "tests.scheduler.blocking_ssh_worker"],
    )
    try:
        for job_id in (1001, 1002):  # a preemption's stops; the worker has one slot
            agent_stop_task.delay(job_id=job_id, attempt=1, grace_seconds=3600)
        wait_for(lambda: client.get(started) == b"1", what="the SSH worker to be busy")

        round_request()

        wait_for(lambda: SchedulingRound.objects.exists(), what="the requested round")
        assert client.get(done) is None  # the stops were still under way
    finally:
        client.set(release, 1)
        worker_stop(rounds)
        worker_stop(ssh)
        client.delete(started, done, release)
