"""After a round commits: real nodes get Celery tasks, simulated nodes run in-process;
the periodic agent tasks are declared in config/celery_app.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from agents import tasks
from agents.services import (
    agent_launch_gave_up,
    agent_launch_request,
    agent_stop_request,
    node_liveness_sweep,
)
from agents.ssh import HostKeyRefused, NodeUnreachable
from cluster.choices import NodeState
from cluster.models import Node
from config.celery_app import SCHEDULER_QUEUE, SSH_QUEUE, app, queue_name
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_mark_lost, job_mark_running, job_preempt, job_start
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, JobFactory, NodeFactory
from tests.outages import broker_unreachable


@pytest.fixture
def real_node(db: None) -> Node:
    node = NodeFactory(name="real-0")
    DeviceFactory(node=node, index=0)
    return node


def test_a_start_on_a_real_node_becomes_a_launch_task(
    real_node: Node, settings: Any, celery_published: Any
) -> None:
    settings.GPULAB_SCHEDULER_MODE = "celery"
    job = started_job(real_node, command=["true"])

    agent_launch_request(job_id=job.pk, attempt=1)
    agent_stop_request(job_id=job.pk, attempt=1, grace_seconds=30)

    assert celery_published() == [
        (tasks.agent_launch_task.name, {"job_id": job.pk, "attempt": 1}),
        (tasks.agent_stop_task.name, {"job_id": job.pk, "attempt": 1, "grace_seconds": 30}),
    ]


def test_without_celery_a_real_node_launch_is_only_logged(
    real_node: Node, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.GPULAB_SCHEDULER_MODE = "embedded"
    job = started_job(real_node, command=["true"])
    agent_launch_request(job_id=job.pk, attempt=1)
    assert "no Celery worker" in caplog.text
    assert Job.objects.get(pk=job.pk).state == JobState.STARTING


def test_a_launch_that_cannot_reach_the_node_requeues_the_job_and_takes_the_node_out(
    real_node: Node,
) -> None:
    job = started_job(real_node, command=["true"], max_retries=0)

    agent_launch_gave_up(
        job_id=job.pk,
        attempt=1,
        error=NodeUnreachable("Node real-0 is unreachable over SSH: [Errno 113] No route"),
    )

    job.refresh_from_db()
    assert (job.state, job.retries_used) == (JobState.PENDING, 0)
    real_node.refresh_from_db()
    # Every user reads state_reason: the SSH error's detail stays in the worker's log.
    assert (real_node.state, real_node.state_reason) == (NodeState.DOWN, "Unreachable over SSH.")


def test_a_node_taken_down_by_a_failed_launch_requeues_its_other_jobs_too(real_node: Node) -> None:
    # Nothing polls a DOWN node, so a job left RUNNING (or PREEMPTING) there would stay so
    # for ever, holding its GPUs.
    devices = [real_node.devices.get()] + [
        DeviceFactory(node=real_node, index=i, uuid=f"GPU-real-{i}") for i in (1, 2)
    ]
    jobs = [JobFactory() for _ in devices]
    for job, device in zip(jobs, devices, strict=True):
        job_start(job_id=job.pk, device_ids=[device.pk])
    launching, running, stopping = jobs
    job_mark_running(job_id=running.pk)
    job_mark_running(job_id=stopping.pk)
    job_preempt(job_id=stopping.pk, reason="test")

    agent_launch_gave_up(job_id=launching.pk, attempt=1, error=HostKeyRefused("Host key refused."))

    assert set(Job.objects.values_list("state", flat=True)) == {JobState.PENDING}
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()
    assert Job.objects.get(pk=running.pk).reason == (
        "Node real-0 went down (host key not approved for SSH; an admin must review it). Requeued."
    )
    assert Job.objects.get(pk=running.pk).retries_used == 0


def test_a_stale_launch_delivery_that_gives_up_leaves_the_running_job_and_node_alone(
    real_node: Node,
) -> None:
    job = started_job(real_node, command=["true"])
    job_mark_running(job_id=job.pk)  # the other delivery reached the node and launched it

    agent_launch_gave_up(job_id=job.pk, attempt=1, error=NodeUnreachable("unreachable"))

    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    real_node.refresh_from_db()
    assert real_node.state == NodeState.UP


def test_a_job_left_lost_is_requeued_by_the_next_sweep(real_node: Node) -> None:
    job = started_job(real_node, command=["true"])
    job_mark_lost(job_id=job.pk, message="test: the worker died before the requeue")

    node_liveness_sweep()

    job.refresh_from_db()
    assert (job.state, job.retries_used) == (JobState.PENDING, 0)


def test_every_periodic_agent_task_is_declared_and_registered() -> None:
    app.loader.import_default_modules()
    names = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {
        "agents.poll_all",
        "agents.liveness_sweep",
        "agents.drain_settle",
        "agents.metrics_rollup",
        "agents.simulated_heartbeats",
    } <= names
    assert names <= set(app.tasks)


def test_the_poll_visits_real_trusted_nodes_that_are_not_down(db: None) -> None:
    from django.utils import timezone

    from agents.models import NodeHostKey
    from agents.selectors import nodes_to_poll

    def node(name: str, *, trusted: bool = True, **fields: Any) -> Node:
        made = NodeFactory(name=name, **fields)
        NodeHostKey.objects.create(
            node=made, key_type="ssh-ed25519", key_base64=name, fingerprint="x",
            approved_at=timezone.now() if trusted else None,
        )  # fmt: skip
        return made

    idle = node("idle")
    drained = node("drained", state=NodeState.DRAINED)
    node("down", state=NodeState.DOWN)
    node("untrusted", trusted=False)
    node("demo", simulated=True)

    assert nodes_to_poll() == [idle.pk, drained.pk]


def test_launches_and_stops_whose_task_was_lost_are_asked_for_again(
    real_node: Node, settings: Any, celery_published: Any
) -> None:
    DeviceFactory(node=real_node, index=1)
    DeviceFactory(node=NodeFactory(name="demo", simulated=True), index=0)
    stuck_start = started_job(real_node, command=["true"])
    stuck_stop = _started_on_second_gpu(real_node)
    job_mark_running(job_id=stuck_stop.pk)
    job_preempt(job_id=stuck_stop.pk, reason="test")
    long_ago = timezone.now() - timedelta(hours=2)
    Job.objects.update(updated_at=long_ago)
    tasks.agent_poll_all_task()

    # Besides one poll per real node, the lost launch and the lost stop are asked again.
    asked_again = [m for m in celery_published() if m[0] != tasks.agent_node_poll_task.name]
    assert asked_again == [
        (tasks.agent_launch_task.name, {"job_id": stuck_start.pk, "attempt": 1}),
        (
            tasks.agent_stop_task.name,
            {"job_id": stuck_stop.pk, "attempt": 1, "grace_seconds": 30},
        ),
    ]


def _started_on_second_gpu(node: Node) -> Job:
    from jobs.services import job_start
    from tests.factories import JobFactory

    job = JobFactory(command=["true"])
    return job_start(job_id=job.pk, device_ids=[node.devices.get(index=1).pk])


def test_ssh_work_and_control_plane_tasks_go_to_their_own_queues(
    real_node: Node, settings: Any, celery_published: Any
) -> None:
    from scheduler.tasks import scheduling_round_task

    settings.GPULAB_SCHEDULER_MODE = "celery"
    job = started_job(real_node, command=["true"])
    agent_launch_request(job_id=job.pk, attempt=1)
    scheduling_round_task.apply_async(kwargs={"trigger": "event"}, expires=60)
    tasks.node_liveness_sweep_task.delay()
    tasks.agent_node_poll_task.delay(node_id=real_node.pk)

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)

    def names_in(queue: str) -> list[str]:
        return [json.loads(raw)["headers"]["task"] for raw in client.lrange(queue, 0, -1)]

    assert sorted(names_in(queue_name(SCHEDULER_QUEUE))) == [
        "agents.liveness_sweep",
        "scheduler.round",
    ]
    assert sorted(names_in(queue_name(SSH_QUEUE))) == ["agents.launch", "agents.node_poll"]
    assert names_in(settings.CELERY_TASK_DEFAULT_QUEUE) == []
    assert len(celery_published()) == 4  # and nothing went elsewhere


def test_every_routed_task_exists_and_every_queue_has_a_worker_in_compose() -> None:
    """A routed name with a typo, or a queue no worker of docker-compose.yml consumes,
    would leave its tasks waiting for ever."""
    from pathlib import Path

    import yaml

    from config.celery_app import TASK_QUEUES

    app.loader.import_default_modules()
    assert set(TASK_QUEUES) <= set(app.tasks)
    compose = yaml.safe_load((Path(settings.BASE_DIR) / "docker-compose.yml").read_text())
    consumed: dict[str, set[str]] = {}
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if command[:4] == ["celery", "-A", "config.celery_app", "worker"]:
            consumed[name] = set(command[command.index("--queues") + 1].split(","))
    # Celery's default queue name: what production's (unrenamed) routes resolve to.
    assert set().union(*consumed.values()) == {SCHEDULER_QUEUE, SSH_QUEUE, "celery"}
    # The rounds' worker takes nothing that may wait on a node.
    scheduler_workers = [queues for queues in consumed.values() if SCHEDULER_QUEUE in queues]
    assert scheduler_workers == [{SCHEDULER_QUEUE}]


def test_node_polls_expire_instead_of_piling_up(real_node: Node, settings: Any) -> None:
    from django.utils import timezone

    from agents.models import NodeHostKey

    NodeHostKey.objects.create(
        node=real_node, key_type="ssh-ed25519", key_base64="x", fingerprint="x",
        approved_at=timezone.now(),
    )  # fmt: skip
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue = queue_name(SSH_QUEUE)
    client.delete(queue)
    try:
        tasks.agent_poll_all_task()
        (raw,) = client.lrange(queue, 0, -1)
        headers = json.loads(raw)["headers"]
        assert headers["task"] == "agents.node_poll"
        assert headers["expires"] is not None
    finally:
        client.delete(queue)


@pytest.fixture
def dead_broker() -> Iterator[Callable[[], None]]:
    with broker_unreachable() as restore:
        yield restore


def test_a_launch_lost_to_a_broker_error_is_sent_again_by_the_next_poll(
    real_node: Node,
    settings: Any,
    celery_published: Any,
    dead_broker: Callable[[], None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    from agents.selectors import LAUNCH_UNDELIVERED_REASON
    from scheduler.services import scheduling_round_run

    settings.GPULAB_SCHEDULER_MODE = "celery"
    job = JobFactory(command=["true"], num_gpus=1)
    with django_capture_on_commit_callbacks(execute=True):
        scheduling_round_run()  # places the job on real-0; its launch cannot be sent
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.STARTING, LAUNCH_UNDELIVERED_REASON)

    dead_broker()  # the broker is back
    tasks.agent_poll_all_task()  # the next poll, seconds later: not the 20-minute sweep

    assert celery_published() == [(tasks.agent_launch_task.name, {"job_id": job.pk, "attempt": 1})]
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.STARTING, "")
    # Sent once: the launch now on the queue is not asked for again at every poll.
    tasks.agent_poll_all_task()
    assert celery_published() == [(tasks.agent_launch_task.name, {"job_id": job.pk, "attempt": 1})]


def test_an_overdue_launch_is_asked_for_again_once_per_launch_interval_not_every_poll(
    real_node: Node,
    settings: Any,
    celery_published: Any,
    dead_broker: Callable[[], None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # After an outage longer than the overdue interval (2 x the launch timeout), the job's
    # row is old: the re-sent launch's attempt was overdue again at the next poll, and a
    # copy went out every 10 s while the first one still pulled its image on the node.
    from scheduler.services import scheduling_round_run

    settings.GPULAB_SCHEDULER_MODE = "celery"
    job = JobFactory(command=["true"], num_gpus=1)
    with django_capture_on_commit_callbacks(execute=True):
        scheduling_round_run()  # its launch cannot be sent
    Job.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    dead_broker()  # the broker is back, an hour later

    for _ in range(3):  # three polls, 10 s apart
        tasks.agent_poll_all_task()

    launches = [kwargs for name, kwargs in celery_published() if name == "agents.launch"]
    assert launches == [{"job_id": job.pk, "attempt": 1}]


def test_an_overdue_stop_is_asked_for_again_once_per_stop_interval_not_every_poll(
    real_node: Node, settings: Any, celery_published: Any
) -> None:
    job = started_job(real_node, command=["sleep", "600"])
    job_mark_running(job_id=job.pk)
    job_preempt(job_id=job.pk, reason="test")
    Job.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(hours=2))

    for _ in range(3):
        tasks.agent_poll_all_task()

    stops = [kwargs for name, kwargs in celery_published() if name == "agents.stop"]
    assert [(s["job_id"], s["attempt"]) for s in stops] == [(job.pk, 1)]


def test_one_poll_of_a_node_at_a_time(real_node: Node, monkeypatch: Any) -> None:
    # A poll stopping a stale attempt waits a grace period; the polls queued meanwhile
    # each stopped it again. One finding a poll of its node under way leaves it alone.
    calls: list[int] = []

    def poll(*, node_id: int, grace_seconds: int) -> dict[str, int]:
        calls.append(node_id)
        assert tasks.agent_node_poll_task(node_id) is None  # a second poll, meanwhile
        return {}

    monkeypatch.setattr(tasks, "agent_node_poll", poll)
    assert tasks.agent_node_poll_task(real_node.pk) == {}
    assert tasks.agent_node_poll_task(real_node.pk) == {}  # the guard went with the poll
    assert calls == [real_node.pk, real_node.pk]


def test_a_launch_that_still_cannot_be_sent_stays_marked_for_the_next_poll(
    real_node: Node, settings: Any, dead_broker: Callable[[], None]
) -> None:
    from agents.selectors import LAUNCH_UNDELIVERED_REASON, launches_undelivered
    from agents.services import launch_undelivered_mark, undelivered_launches_request

    settings.GPULAB_SCHEDULER_MODE = "celery"
    job = started_job(real_node, command=["true"])
    launch_undelivered_mark(job_id=job.pk, attempt=1)

    assert undelivered_launches_request() == []
    assert launches_undelivered() == [(job.pk, 1)]
    assert Job.objects.get(pk=job.pk).reason == LAUNCH_UNDELIVERED_REASON


def test_a_lost_launch_of_a_job_that_moved_on_is_not_sent_again(real_node: Node) -> None:
    from agents.selectors import launches_undelivered
    from agents.services import launch_undelivered_mark
    from jobs.services import job_cancel

    job = started_job(real_node, command=["true"])
    launch_undelivered_mark(job_id=job.pk, attempt=1)
    job_cancel(job_id=job.pk, by=job.owner)

    assert launches_undelivered() == []
