"""A round asks the agents for work only once it has let go of the round lock, and only
for decisions that committed; and a broker that never answers cannot hang the sender."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from celery import Celery
from django.db import connection, transaction

from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_submit
from scheduler import services as round_services
from scheduler.locks import ROUND_LOCK_KEY
from scheduler.services import scheduling_round_run
from tests.scheduler.livefixtures import simulated_cluster


def _round_lock_free() -> bool:
    """Whether another session could take the round lock now (then gives it back)."""
    other = psycopg2.connect(**connection.get_connection_params())
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ROUND_LOCK_KEY])
            (taken,) = cursor.fetchone()
            if taken:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [ROUND_LOCK_KEY])
        return taken
    finally:
        other.close()


@pytest.fixture
def dispatches(monkeypatch: Any) -> list[tuple[list[tuple[int, int]], bool]]:
    """Each dispatch of a round: the attempts it starts, and whether the lock was free."""
    sent: list[tuple[list[tuple[int, int]], bool]] = []

    def dispatch(result: round_services.ApplyResult, grace_seconds: int) -> None:
        sent.append((list(result.started), _round_lock_free()))

    monkeypatch.setattr(round_services, "_dispatch_to_agents", dispatch)
    return sent


@pytest.mark.django_db(transaction=True)
def test_a_round_dispatches_its_starts_after_releasing_the_round_lock(owner, dispatches) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the round lock is a PostgreSQL advisory lock")
    simulated_cluster(nodes=1, gpus_per_node=1)
    job = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=1))

    scheduling_round_run()

    # Sent while the lock was held, a hung broker would stop every later round.
    assert dispatches == [([(job.pk, 1)], True)]


@pytest.mark.django_db(transaction=True)
def test_a_round_in_a_transaction_dispatches_on_its_commit_and_never_after_a_rollback(
    owner, dispatches
) -> None:
    simulated_cluster(nodes=1, gpus_per_node=1)
    job = job_submit(owner=owner, spec=JobSpec(image="busybox", command=["true"], num_gpus=1))

    with pytest.raises(RuntimeError), transaction.atomic():
        scheduling_round_run()
        assert dispatches == []  # not before the commit
        raise RuntimeError("the caller's transaction rolls back")

    assert dispatches == []
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING

    with transaction.atomic():
        scheduling_round_run()
        assert dispatches == []
    assert [started for started, _ in dispatches] == [[(job.pk, 1)]]


@pytest.fixture
def silent_broker() -> Iterator[int]:
    """A port that accepts connections and never answers: a hung Redis."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for client in accepted:
        client.close()
    server.close()


def test_sending_a_task_to_a_broker_that_never_answers_fails_instead_of_hanging(
    silent_broker: int,
) -> None:
    app = Celery("fixloop-silent-broker")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = f"redis://127.0.0.1:{silent_broker}/0"
    outcome: dict[str, BaseException] = {}

    def send() -> None:
        try:
            app.send_task("agents.launch", kwargs={"job_id": 1, "attempt": 1})
        except Exception as exc:
            outcome["error"] = exc

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    # A liveness bound, far above the socket timeouts: without them the send never ends.
    sender.join(120)
    assert not sender.is_alive()
    assert "error" in outcome  # for the caller to log and mark (launch_undelivered_mark)
