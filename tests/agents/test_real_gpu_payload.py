"""The control plane accepts what the real agent read from a real GPU.

`bench/results/nvml_real_gpu.json` holds three heartbeats that `bench/nvml_real_gpu.py`
captured from the unmodified `python -m agents.node_agent --once` over real pynvml on an NVIDIA
H100 (idle, then twice under a PyTorch load tagged GPULAB_JOB_ID=4242 that writes its count
of matrix products to GPULAB_PROGRESS_FILE, which the agent read through /proc/<pid>/root).
Replaying those exact bodies through the heartbeat endpoint checks that the fields real NVML
produces (driver strings, power, ECC counters, process lists, progress) pass the endpoint's
validation and are stored, which the simulated NVML alone cannot prove.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from agents.heartbeats import node_agent_token_create
from agents.models import GpuSample, JobGpuSample, JobProgress
from cluster.models import Device
from jobs.services import job_start
from tests.agents.conftest import run_cache_clear
from tests.factories import JobFactory, NodeFactory

CAPTURE = Path(__file__).resolve().parents[2] / "bench" / "results" / "nvml_real_gpu.json"
URL = "/api/v1/agents/heartbeat/"


@pytest.mark.django_db
def test_heartbeats_captured_on_a_real_h100_are_accepted_and_stored() -> None:
    run_cache_clear()
    capture = json.loads(CAPTURE.read_text())
    idle, loaded, loaded_again = (entry["payload"] for entry in capture["heartbeats"])
    assert capture["heartbeats"][0]["path"] == URL  # the agent posted where we serve
    node = NodeFactory(name="h100-box")
    _, key = node_agent_token_create(node_id=node.pk)
    client = APIClient()

    def post(payload: dict) -> None:
        response = client.post(URL, payload, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")
        assert response.status_code == 200, response.content

    # The capture predates agent version 2, which names the GPU each progress reading was
    # read through: here the one process tagged 4242, listed on the only GPU.
    for payload in (loaded, loaded_again):
        (process,) = payload["gpus"][0]["processes"]
        assert [entry["job_id"] for entry in payload["jobs"]] == [process["job_id"]] == [4242]
        payload["jobs"][0]["gpu_uuid"] = payload["gpus"][0]["uuid"]

    post(idle)  # registers the GPU
    device = Device.objects.get(uuid=loaded["gpus"][0]["uuid"])
    # The job the loaded process was tagged with, holding that GPU as a round leaves it.
    job = job_start(job_id=JobFactory(pk=4242).pk, device_ids=[device.pk])
    assert job.attempt == 1
    post(loaded)

    assert device.node_id == node.pk
    assert device.device_type.name == "h100-80gb-hbm3"
    node.refresh_from_db()
    assert node.labels["driver_version"] == idle["driver_version"]
    utilizations = sorted(GpuSample.objects.filter(device=device).values_list("utilization_pct"))
    assert utilizations == [(0,), (98,)]
    # The real process list, mapped to the job by the agent, is stored as the job's use.
    (process,) = loaded["gpus"][0]["processes"]
    (sample,) = JobGpuSample.objects.filter(job_id=4242, device=device)
    assert (sample.attempt, sample.utilization_pct) == (1, 98)
    assert sample.memory_used_mb == process["used_memory_mb"] > 0
    # The job's own progress, read by the agent from the file the load wrote, grows.
    post(loaded_again)
    row = JobProgress.objects.get(job_id=4242, attempt=1)
    assert row.device_type == device.device_type
    assert (row.first_progress, row.last_progress) == (
        loaded["jobs"][0]["progress"],
        loaded_again["jobs"][0]["progress"],
    )
    assert 0 < row.first_progress < row.last_progress
