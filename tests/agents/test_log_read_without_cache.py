"""A log read works with the cache (Redis) unreachable: the cache only holds its guard
and the short memory of a node that did not answer, and fails open."""

from __future__ import annotations

from typing import Any

from agents.logs import job_log_tail
from agents.services import agent_launch, agent_logs_tail
from cluster.models import Node
from jobs.models import Job
from tests.agents.conftest import started_job, wait_for

NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_the_log_is_read_from_the_node_while_the_cache_is_down(
    ssh_node: Node, settings: Any
) -> None:
    job = started_job(ssh_node, command=["sh", "-c", "echo hello; sleep 30"])
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "hello\n")
    caches = dict(settings.CACHES)
    caches["default"] = {**caches["default"], "LOCATION": NOWHERE}
    settings.CACHES = caches

    log = job_log_tail(job=Job.objects.get(pk=job.pk), stream="stdout")

    assert (log.text, log.problem) == ("hello\n", "")
