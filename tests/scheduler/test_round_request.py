"""Requesting a round after a submit or cancel never fails the request that committed it.

The request runs on commit; Redis (the coalescing key) or the broker (the round task)
being unreachable is logged, and the timer's round schedules the job later. These run
with real commits (transactional_db), so the on-commit hooks run as in production.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from config.celery_app import SCHEDULER_QUEUE, queue_name
from jobs.choices import JobState
from jobs.models import Job
from scheduler.triggers import REQUEST_KEY, round_request
from tests.outages import DEAD_CACHES, broker_unreachable

SUBMIT = {"image": "pytorch/pytorch:2.4.0", "command": ["sleep", "600"], "num_gpus": 1}


@pytest.fixture
def round_queue() -> Iterator[redis.Redis]:
    """The broker's list of round tasks of this test run, emptied before and after."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(queue_name(SCHEDULER_QUEUE))
    cache.delete(REQUEST_KEY)
    yield client
    client.delete(queue_name(SCHEDULER_QUEUE))
    cache.delete(REQUEST_KEY)


def rounds_published(client: redis.Redis) -> list[str]:
    return [
        json.loads(raw)["headers"]["task"]
        for raw in client.lrange(queue_name(SCHEDULER_QUEUE), 0, -1)
    ]


def warnings_with_exception(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "scheduler.triggers"
        and record.levelno == logging.WARNING
        and record.exc_info is not None
    ]


def test_a_submission_commits_and_answers_201_while_the_broker_is_unreachable(
    transactional_db: None,
    small_cluster: Any,
    owner: Any,
    api_as: Any,
    settings: Any,
    round_queue: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.GPULAB_SCHEDULER_MODE = "celery"
    client = api_as(owner)
    with broker_unreachable() as broker_back:
        response = client.post("/api/v1/jobs/", SUBMIT, format="json")
        assert response.status_code == 201
        assert Job.objects.get(pk=response.json()["id"]).state == JobState.PENDING
        assert warnings_with_exception(caplog)
        # No round is on its way, so the coalescing key must not swallow the next request.
        assert cache.get(REQUEST_KEY) is None

        broker_back()
        assert client.post("/api/v1/jobs/", SUBMIT, format="json").status_code == 201
    assert rounds_published(round_queue) == ["scheduler.round"]


def test_a_cancel_commits_and_answers_200_while_the_cache_is_unreachable(
    transactional_db: None,
    small_cluster: Any,
    owner: Any,
    api_as: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = api_as(owner)
    job = client.post("/api/v1/jobs/", SUBMIT, format="json").json()
    settings.GPULAB_SCHEDULER_MODE = "celery"
    settings.CACHES = DEAD_CACHES

    response = client.post(f"/api/v1/jobs/{job['id']}/cancel/")

    assert response.status_code == 200
    assert Job.objects.get(pk=job["id"]).state == JobState.CANCELLED
    assert warnings_with_exception(caplog)


def test_an_api_submission_commits_and_answers_201_while_the_cache_is_unreachable(
    transactional_db: None,
    small_cluster: Any,
    owner: Any,
    api_as: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The submission rate limit keeps its counts in the cache too: it is skipped, not a 500.
    client = api_as(owner)
    settings.GPULAB_SCHEDULER_MODE = "celery"
    settings.CACHES = DEAD_CACHES

    response = client.post("/api/v1/jobs/", SUBMIT, format="json")

    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["id"]).state == JobState.PENDING
    assert "Rate limit 'job_submit' not checked" in caplog.text


def test_a_form_submission_commits_while_the_cache_is_unreachable(
    transactional_db: None, small_cluster: Any, owner: Any, client: Any, settings: Any
) -> None:
    client.force_login(owner)
    settings.GPULAB_SCHEDULER_MODE = "celery"
    settings.CACHES = DEAD_CACHES

    response = client.post(
        "/jobs/submit/",
        {"image": "pytorch/pytorch:2.4.0", "command": "sleep 600", "num_gpus": 1,
         "consolidation": "any", "max_retries": 0},
    )  # fmt: skip

    assert response.status_code == 302
    assert Job.objects.filter(owner=owner, state=JobState.PENDING).count() == 1


def test_a_burst_of_requests_sends_one_round(
    db: None, settings: Any, round_queue: redis.Redis
) -> None:
    settings.GPULAB_SCHEDULER_MODE = "celery"
    for _ in range(5):
        round_request()
    assert rounds_published(round_queue) == ["scheduler.round"]
