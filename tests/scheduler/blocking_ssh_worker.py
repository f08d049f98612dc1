"""A real Celery worker (`python -m tests.scheduler.blocking_ssh_worker <celery args>`)
whose `agents.stop` stands in for a node that takes long: it blocks, as `_stop_attempt`
does for the preemption grace, until the test sets `<run id>:stops-release` in Redis.
It counts `<run id>:stops-started` and `<run id>:stops-done` there."""

from __future__ import annotations

import sys
import time

from celery.signals import task_prerun


def stop_keys(run_id: str) -> tuple[str, str, str]:
    return f"{run_id}:stops-started", f"{run_id}:stops-done", f"{run_id}:stops-release"


@task_prerun.connect
def _stops_block(task=None, **_: object) -> None:  # type: ignore[no-untyped-def]
    if task is None or task.name != "agents.stop":
        return
    import redis
    from django.conf import settings

    import agents.tasks

    started, done, release = stop_keys(settings.TEST_RUN_ID)

    def blocking_stop(*, job_id: int, attempt: int, grace_seconds: int) -> None:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        client.incr(started)
        while not client.exists(release):
            time.sleep(0.1)
        client.incr(done)

    agents.tasks.agent_stop = blocking_stop


if __name__ == "__main__":
    from celery.__main__ import main

    sys.argv = ["celery", *sys.argv[1:]]
    main()
