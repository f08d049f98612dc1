"""A web request's log read against a node that takes TCP connections but never answers.

The job page's log fragment and the API's log endpoint read over SSH inside a web request:
they connect once with short timeouts (not the tasks' retries), one request at a time per
attempt, and a failure is remembered. The stand-in node is a real socket that accepts and
never sends SSH's banner (a hung sshd); counting the connections it accepted says how many
times gpulab tried, without timing anything.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.db import connection
from rest_framework.test import APIClient

from agents.logs import job_log_tail
from agents.ssh import NodeUnreachable, node_ssh
from cluster.models import Node
from jobs.models import Job
from jobs.services import job_start
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, JobFactory, NodeFactory


class SilentServer:
    """Listens on 127.0.0.1, accepts every connection, and never writes a byte."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)  # so the accept loop sees `stopping` soon
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.first_accepted = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)
            self.first_accepted.set()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture
def hung_node(db: None, silent_server: SilentServer, ssh_settings, settings) -> Node:  # type: ignore[no-untyped-def]
    """A node at the silent server, with the tasks' retries at their defaults' shape (3
    tries) but short, so a read that used them would still end soon."""
    settings.GPULAB_SSH_CONNECT_ATTEMPTS = 3
    settings.GPULAB_SSH_TIMEOUT_SECONDS = 2
    node = NodeFactory(name="hungnode", address="127.0.0.1", ssh_port=silent_server.port)
    DeviceFactory(node=node, index=0)
    return node


def _log_keys(job: Job) -> list[str]:
    node_ids = job.allocations.values_list("device__node_id", flat=True)
    return [
        *(f"jobs:logs-unreachable-node:{node_id}" for node_id in node_ids),
        f"jobs:logs-reading:{job.pk}:{job.attempt}",
    ]


@pytest.fixture
def hung_job(hung_node: Node) -> Iterator[Job]:
    job = started_job(hung_node, command=["true"])
    # Job ids repeat in a later run's fresh database, and the cache outlives it.
    cache.delete_many(_log_keys(job))
    yield job
    cache.delete_many(_log_keys(job))


def test_a_log_read_connects_once_and_remembers_the_node_did_not_answer(
    hung_job: Job, silent_server: SilentServer
) -> None:
    log = job_log_tail(job=hung_job, stream="stdout")

    assert log.unavailable
    assert log.problem == "The log cannot be read from node hungnode right now."
    assert "hungnode is unreachable over SSH" in log.detail
    assert len(silent_server.accepted) == 1  # not GPULAB_SSH_CONNECT_ATTEMPTS (3)
    assert cache.get(f"jobs:logs-unreachable-node:{hung_job.allocations.get().device.node_id}") == (
        log.detail
    )

    again = job_log_tail(job=hung_job, stream="stderr")

    assert again.unavailable and again.detail == log.detail
    assert len(silent_server.accepted) == 1  # answered from the backoff, no SSH


def test_the_api_answers_503_after_one_connect_attempt(
    hung_job: Job, silent_server: SilentServer
) -> None:
    client = APIClient()
    client.force_authenticate(hung_job.owner)

    response = client.get(f"/api/v1/agents/jobs/{hung_job.pk}/logs/")

    assert response.status_code == 503
    assert response.json()["code"] == "logs_unavailable"
    assert len(silent_server.accepted) == 1


def test_tasks_still_retry_as_the_settings_say(
    hung_node: Node, silent_server: SilentServer, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.GPULAB_SSH_CONNECT_ATTEMPTS = 2
    settings.GPULAB_SSH_TIMEOUT_SECONDS = 1

    with pytest.raises(NodeUnreachable, match="unreachable over SSH"), node_ssh(hung_node):
        pass

    assert len(silent_server.accepted) == 2


@pytest.mark.django_db(transaction=True)  # the other request reads the rows from its thread
def test_a_second_request_does_not_pile_onto_a_read_in_progress(
    hung_job: Job, silent_server: SilentServer
) -> None:
    first: list = []

    def another_request() -> None:
        try:
            first.append(job_log_tail(job=hung_job, stream="stdout"))
        finally:
            connection.close()

    reader = threading.Thread(target=another_request)
    reader.start()
    # Once the node has a connection, that request holds the read (taken before SSH).
    assert silent_server.first_accepted.wait(timeout=30)

    second = job_log_tail(job=hung_job, stream="stdout")

    reader.join(timeout=60)
    assert second.unavailable
    assert second.problem == (
        "The log is being read from node hungnode for another viewer; try again in a few seconds."
    )
    assert first and first[0].unavailable
    assert len(silent_server.accepted) == 1
    node_id = hung_job.allocations.get().device.node_id
    assert cache.get(f"jobs:logs-unreachable-node:{node_id}") is not None


def test_another_jobs_log_on_the_same_node_is_not_tried_again(
    hung_job: Job, hung_node: Node, silent_server: SilentServer
) -> None:
    second_gpu = DeviceFactory(node=hung_node, index=1)
    other = job_start(job_id=JobFactory(command=["true"]).pk, device_ids=[second_gpu.pk])
    cache.delete(f"jobs:logs-reading:{other.pk}:{other.attempt}")

    first = job_log_tail(job=hung_job, stream="stdout")
    second = job_log_tail(job=other, stream="stdout")

    assert first.unavailable and second.unavailable
    assert second.problem == "The log cannot be read from node hungnode right now."
    assert len(silent_server.accepted) == 1  # the second page was told from the backoff
