"""Cancelling an array while an agent reports one of its tasks finished: each end charges
the owner's usage (a lock on the owner's row), so the cancel must hold every task's row
before it charges for any, or the two wait for each other (PostgreSQL's deadlock)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from jobs import services
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_array_cancel, job_finish, job_mark_running, job_start
from tests.scheduler.livefixtures import simulated_cluster

WAIT = 10.0  # seconds: no step of the test waits longer, so a regression cannot hang CI


def _someone_waits_for_a_lock() -> bool:
    """Whether another connection to this database waits for a row lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_an_array_cancel_and_a_task_finishing_do_not_deadlock(owner, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    gpus = simulated_cluster(nodes=1, gpus_per_node=2)
    spec = JobSpec(image="img:1", command=["true"], array_size=2)
    first = services.job_submit(owner=owner, spec=spec)
    t0, t1 = Job.objects.filter(array_id=first.array_id).order_by("array_index")
    for task, gpu in ((t0, gpus[0]), (t1, gpus[1])):
        job_start(job_id=task.pk, device_ids=[gpu.pk])
        job_mark_running(job_id=task.pk)

    # The cancel (A) ends task 1 first (last index first) and charges the owner; then the
    # agent's finish of task 0 (B) runs. Without the locks taken up front, B takes task
    # 0's row and waits for the owner's, A then waits for task 0's: a deadlock. With
    # them, B waits for task 0's row until A commits.
    a_charged = threading.Event()
    b_charging = threading.Event()
    who = threading.local()
    original = services._charge_usage

    def charge(model, pk, usage, now):  # type: ignore[no-untyped-def]
        name = getattr(who, "name", "")
        if name == "B" and model.__name__ == "User":
            b_charging.set()  # task 0's row is B's by now
        original(model, pk, usage, now)
        if name == "A" and model.__name__ == "User" and not a_charged.is_set():
            a_charged.set()
            deadline = time.monotonic() + WAIT
            # Until B holds task 0's row (no fix) or is seen waiting for it (the fix).
            while not b_charging.wait(0.05) and time.monotonic() < deadline:
                if _someone_waits_for_a_lock():
                    break

    monkeypatch.setattr(services, "_charge_usage", charge)
    outcomes: dict[str, str] = {}

    def run(name: str, call) -> None:  # type: ignore[no-untyped-def]
        who.name = name
        try:
            call()
            outcomes[name] = "ok"
        except Exception as exc:  # any failure is the finding
            outcomes[name] = f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()

    def finish() -> None:
        assert a_charged.wait(WAIT)
        job_finish(job_id=t0.pk, exit_code=0)

    threads = [
        threading.Thread(
            target=run, args=("A", lambda: job_array_cancel(array_id=first.array_id, by=owner))
        ),
        threading.Thread(target=run, args=("B", finish)),
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * WAIT)
    assert not any(thread.is_alive() for thread in threads), "a thread is still waiting"

    # The cancel won task 0's row: the finish found it cancelled, which agents expect.
    assert outcomes["A"] == "ok", outcomes
    assert outcomes["B"].startswith("IllegalTransition"), outcomes
    assert set(Job.objects.filter(array_id=first.array_id).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }
    assert time.monotonic() - started < WAIT
