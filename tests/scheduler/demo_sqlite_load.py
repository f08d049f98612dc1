"""Run the demo's embedded loop against web-like writers on the demo's own SQLite settings.

Started by tests/scheduler/test_demo_sqlite_concurrency.py in a subprocess with
DJANGO_SETTINGS_MODULE=config.settings.local and DATABASE_URL naming a fresh SQLite file
(the test settings use PostgreSQL, and the fix under test lives in the local settings).
Prints one JSON object: the database errors each side met and how much work was done.
"""

from __future__ import annotations

import io
import json
import sys
import threading

import django

WRITERS = 6
JOBS_PER_WRITER = 8
LOOP_PASSES_AT_LEAST = 10


def main() -> None:
    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections

    from accounts.models import User
    from jobs.models import Job
    from jobs.services import JobSpec, job_cancel, job_submit
    from scheduler.embedded import iterate
    from scheduler.models import SchedulingRound

    assert connection.vendor == "sqlite", connection.vendor
    call_command("migrate", verbosity=0)
    call_command("demo_seed", stdout=io.StringIO())
    connections.close_all()

    errors: list[str] = []
    writers_done = threading.Event()
    passes = [0]

    def record(side: str, exc: Exception) -> None:
        errors.append(f"{side}: {type(exc).__name__}: {exc}")

    def loop() -> None:
        # What the demo's scheduler thread does, pass after pass, with a round each time.
        last_round = float("-inf")
        try:
            while not writers_done.is_set() or passes[0] < LOOP_PASSES_AT_LEAST:
                try:
                    last_round, _ = iterate(
                        event=True,
                        now=float(passes[0]),
                        last_round=last_round,
                        next_aggregates=float(passes[0]),
                    )
                except Exception as exc:  # every failure is the finding
                    record("loop", exc)
                passes[0] += 1
        finally:
            connection.close()

    def writer(number: int) -> None:
        # What API requests do: submit a job, then cancel it, each in its own transaction.
        try:
            owner = User.objects.get(username=("alice", "bob", "carol")[number % 3])
            for _ in range(JOBS_PER_WRITER):
                try:
                    job = job_submit(
                        owner=owner,
                        spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "60"]),
                    )
                    job_cancel(job_id=job.pk, by=owner)
                except Exception as exc:
                    record(f"writer {number}", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    scheduler = threading.Thread(target=loop)
    scheduler.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writers_done.set()
    scheduler.join()
    print(
        json.dumps(
            {
                "errors": errors,
                "cancelled": Job.objects.filter(state="CANCELLED").count(),
                "rounds": SchedulingRound.objects.count(),
                "passes": passes[0],
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
