"""A refused heartbeat stores none of its readings but still shows the node is alive:
a GPU conflict (409), an unknown query parameter (400) and a body that is not JSON (415)
must not let the liveness sweep take a healthy node down and requeue its jobs."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import jsonschema
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.heartbeats import node_agent_token_create
from agents.models import GpuSample
from cluster.choices import NodeState
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import job_start
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory

URL = "/api/v1/agents/heartbeat/"


@pytest.fixture(autouse=True)
def _unthrottled(settings: Any) -> None:
    # Node ids repeat between runs in a fresh database; the throttle's keys would not.
    settings.GPULAB_AGENT_HEARTBEAT_RATE = "10000/min"


def gpu(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index:04d}",
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_mb": 81920,
        "memory_used_mb": 10,
        "utilization_pct": 5,
        "temperature_c": 40,
        "power_w": 60.0,
        "ecc_uncorrected": 0,
        "xid_errors": [],
        "processes": [],
    }


def beat(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {"hostname": "n", "driver_version": "550", "cuda_version": "12.4", "gpus": gpus}


@pytest.fixture
def suspect_node() -> tuple[Node, str]:
    """A node with GPU-0000 whose last heartbeat was 35 s ago (SUSPECT), and its token."""
    a100 = DeviceTypeFactory(name="a100", speed=2.0)
    node = NodeFactory(name="new", state=NodeState.SUSPECT)
    DeviceFactory(node=node, index=0, uuid="GPU-0000", device_type=a100)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(seconds=35))
    _, key = node_agent_token_create(node_id=node.pk)
    return node, key


def post(key: str, body: Any, *, path: str = URL, content_type: str = "application/json") -> Any:
    data = json.dumps(body) if content_type == "application/json" else body
    return APIClient().post(
        path, data, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key}"
    )


def assert_seen_just_now(node: Node) -> None:
    node.refresh_from_db()
    assert node.state == NodeState.UP
    assert timezone.now() - node.last_heartbeat_at < timedelta(seconds=30)


@pytest.mark.django_db
def test_a_heartbeat_refused_for_a_gpu_conflict_still_counts_as_a_sign_of_life(suspect_node):
    node, key = suspect_node
    # GPU-0001 sits on a node an admin is draining: its jobs may still use it.
    old = NodeFactory(name="old", state=NodeState.DRAINING)
    DeviceFactory(node=old, index=0, uuid="GPU-0001", device_type=node.devices.get().device_type)

    response = post(key, beat([gpu(0), gpu(1)]))

    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    node.refresh_from_db()
    assert timezone.now() - node.last_heartbeat_at < timedelta(seconds=30)
    assert not GpuSample.objects.exists()  # none of its readings
    # Its GPUs are not the registered ones, and the missing-GPU check never ran: drained
    # (at once: nothing runs there), with the conflict as the reason an admin reads.
    assert node.state == NodeState.DRAINED
    assert node.state_reason.startswith("Drained: GPU GPU-0001 is registered on node old")


@pytest.mark.django_db
def test_a_conflict_drains_a_node_whose_registered_gpu_it_no_longer_reports(suspect_node):
    node, key = suspect_node
    old = NodeFactory(name="old", state=NodeState.DRAINING)
    DeviceFactory(node=old, index=0, uuid="GPU-0001", device_type=node.devices.get().device_type)
    running = job_start(job_id=JobFactory().pk, device_ids=[node.devices.get().pk])

    # GPU-0000 is gone from the report; the foreign GPU-0001 is in its slot.
    response = post(key, beat([gpu(1) | {"index": 0}]))

    assert response.status_code == 409
    node.refresh_from_db()
    assert node.state == NodeState.DRAINING  # nothing new goes there; its job finishes
    assert Job.objects.get(pk=running.pk).state == JobState.STARTING


@pytest.mark.django_db
def test_an_unknown_query_parameter_is_a_400_naming_it_and_still_a_sign_of_life(suspect_node):
    node, key = suspect_node

    response = post(key, beat([gpu(0)]), path=f"{URL}?foo=1")

    assert response.status_code == 400
    assert set(response.json()) == {"foo"}
    assert_seen_just_now(node)
    assert not GpuSample.objects.exists()


@pytest.mark.django_db
def test_a_body_that_is_not_json_is_a_415_and_still_a_sign_of_life(suspect_node):
    node, key = suspect_node

    response = post(key, "gpus=1", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert_seen_just_now(node)


@pytest.mark.django_db
def test_the_heartbeats_refusals_match_its_openapi_schema(suspect_node, owner, api_as):
    _, key = suspect_node
    schema = api_as(owner).get("/api/schema/?format=json").json()
    operation = schema["paths"][URL]["post"]
    assert list(operation["requestBody"]["content"]) == ["application/json"]
    bad_gpu = {**gpu(0), "power_w": -1, "processes": [{"pid": -1, "used_memory_mb": 0}]}
    DeviceFactory(node=NodeFactory(name="old"), index=0, uuid="GPU-0001")
    responses = [
        post(key, beat([bad_gpu])),  # nested: gpus → 0 → processes → 0 → pid
        post(key, {**beat([gpu(0)]), "driver_version": 550, "gpus": "x"}),
        post(key, beat([gpu(0)]), path=f"{URL}?foo=1"),
        post(key, "{not json", content_type="application/json"),
        post(key, beat([gpu(0), gpu(1)])),  # 409
        post(key, "a=1", content_type="application/x-www-form-urlencoded"),  # 415
    ]
    assert [r.status_code for r in responses] == [400, 400, 400, 400, 409, 415]
    assert "processes" in str(responses[0].json()["gpus"])
    for response in responses:
        declared = operation["responses"][str(response.status_code)]["content"]
        body_schema = declared["application/json"]["schema"]
        validator = jsonschema.Draft7Validator({**body_schema, "components": schema["components"]})
        errors = [e.message for e in validator.iter_errors(response.json())]
        assert not errors, (response.status_code, response.json(), errors)
