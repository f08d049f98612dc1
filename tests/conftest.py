"""Shared fixtures: named personas, a small cluster, API clients.

Personas (healthchecks/Zulip style): `owner` and `teammate` are students in the same
group, `outsider` is a student in another group, `lab_admin` is an admin.
"""

from __future__ import annotations

import warnings

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.choices import Role
from accounts.models import LabGroup, User
from accounts.services import api_token_create, user_create
from cluster.models import Device
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory


def pytest_report_header(config: pytest.Config) -> list[str]:
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("postgresql"):
        test_name = database.get("TEST", {}).get("NAME") or f"test_{database['NAME']}"
        where = f"postgresql://{database.get('USER')}@{database.get('HOST')}:{database.get('PORT')}/{test_name}"
    else:
        where = f"sqlite ({database['NAME']})"
    return [f"gpulab database: {where}", f"gpulab redis: {settings.REDIS_URL}"]


@pytest.fixture(scope="session", autouse=True)
def _redis_is_reachable() -> None:
    """The cache (rate limits) and, later, Celery need Redis; say so clearly if it is down."""
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        message = f"Redis unreachable at REDIS_URL={settings.REDIS_URL}: {exc}"
        if settings.STRICT_SERVICES:
            pytest.exit(message, returncode=3)
        warnings.warn(message + "; tests that use the cache will fail.", stacklevel=1)


@pytest.fixture
def vision(db: None) -> LabGroup:
    return LabGroup.objects.create(name="vision", weight=2.0)


@pytest.fixture
def nlp(db: None) -> LabGroup:
    return LabGroup.objects.create(name="nlp")


@pytest.fixture
def owner(vision: LabGroup) -> User:
    return user_create(username="alice", password="pw-alice-123", groups=[vision])


@pytest.fixture
def teammate(vision: LabGroup) -> User:
    return user_create(username="bob", password="pw-bob-123", groups=[vision])


@pytest.fixture
def outsider(nlp: LabGroup) -> User:
    return user_create(username="carol", password="pw-carol-123", groups=[nlp])


@pytest.fixture
def lab_admin(db: None) -> User:
    return user_create(username="root", password="pw-root-123", role=Role.ADMIN)


@pytest.fixture
def small_cluster(db: None) -> list[Device]:
    """Two a100 nodes of 4 GPUs and one v100 node of 2: 10 GPUs."""
    a100 = DeviceTypeFactory(name="a100", speed=2.0)
    v100 = DeviceTypeFactory(name="v100", speed=1.0)
    devices = []
    for node_name, device_type, count in (("a0", a100, 4), ("a1", a100, 4), ("v0", v100, 2)):
        node = NodeFactory(name=node_name)
        devices += [
            DeviceFactory(node=node, index=i, device_type=device_type) for i in range(count)
        ]
    return devices


def token_client(user: User) -> APIClient:
    _, key = api_token_create(user=user, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def api_as():
    """api_as(user) -> an APIClient authenticated with a fresh token of that user."""
    return token_client


@pytest.fixture
def celery_published():
    """Tasks really published to this test run's Celery queues on Redis: the default
    queue, then the scheduler's, then the SSH one (config/celery_app.py routes them),
    each oldest first.

    No stand-in broker: `.delay()` goes through kombu to Redis, and this reads the
    messages back from the queues' lists (then empties them, so nothing leaks into a
    later test or a worker).
    """
    import base64
    import json

    import redis

    from config.celery_app import SCHEDULER_QUEUE, SSH_QUEUE, queue_name

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queues = [settings.CELERY_TASK_DEFAULT_QUEUE] + [
        queue_name(kind) for kind in (SCHEDULER_QUEUE, SSH_QUEUE)
    ]
    client.delete(*queues)

    def published() -> list[tuple[str, dict]]:
        messages = []
        for queue in queues:
            for raw in reversed(client.lrange(queue, 0, -1)):  # LPUSH puts the newest first
                envelope = json.loads(raw)
                _args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
                messages.append((envelope["headers"]["task"], kwargs))
        return messages

    yield published
    client.delete(*queues)
