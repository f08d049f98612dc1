"""A GPU memory NVML cannot read this time (not a lost GPU) is "no reading": the agent
still reports the GPU, and the control plane keeps the memory size it registered."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.api.serializers import GpuInput
from agents.heartbeats import node_agent_token_create
from agents.models import GpuSample
from agents.node_agent.collector import NvmlCollector
from agents.node_agent.simnvml import NVMLError, SimGpu, SimulatedNvml
from cluster.models import Device, Node

URL = "/api/v1/agents/heartbeat/"
NVML_ERROR_UNKNOWN = 999
pytestmark = pytest.mark.usefixtures("fresh_rate_limits")


class MemoryUnreadable(SimulatedNvml):
    """An NVML whose memory query fails for a reason other than a lost GPU."""

    def nvmlDeviceGetMemoryInfo(self, handle: SimGpu) -> Any:
        raise NVMLError(NVML_ERROR_UNKNOWN)


def _collect(nvml: SimulatedNvml) -> dict[str, Any]:
    return NvmlCollector(nvml, job_of=lambda pid: None, progress_of=lambda *a: None).collect()


def test_a_memory_nvml_cannot_read_is_sent_as_no_reading_the_control_plane_accepts() -> None:
    (gpu,) = _collect(MemoryUnreadable([SimGpu(uuid="GPU-aa", utilization_pct=40)]))["gpus"]

    assert (gpu["lost"], gpu["utilization_pct"]) == (False, 40)  # the rest is still read
    assert (gpu["memory_total_mb"], gpu["memory_used_mb"]) == (0, 0)
    assert GpuInput(data=gpu).is_valid(), GpuInput(data=gpu).errors


def _beat(node: Node, nvml: SimulatedNvml) -> Any:
    _, key = node_agent_token_create(node_id=node.pk)
    return APIClient().post(URL, _collect(nvml), format="json", HTTP_AUTHORIZATION=f"Bearer {key}")


def test_a_heartbeat_without_the_memory_reading_keeps_the_registered_size(node: Node) -> None:
    assert _beat(node, SimulatedNvml([SimGpu(uuid="GPU-aa")])).status_code == 200
    assert Device.objects.get(uuid="GPU-aa").memory_mb == 81920

    renamed = SimGpu(uuid="GPU-aa", name="NVIDIA A100-SXM4-80GB (renamed)")
    response = _beat(node, MemoryUnreadable([renamed]))

    assert response.status_code == 200
    device = Device.objects.get(uuid="GPU-aa")
    # The rest of the GPU's record is still updated; only its size is kept.
    assert (device.model_name, device.memory_mb) == ("NVIDIA A100-SXM4-80GB (renamed)", 81920)
    assert GpuSample.objects.filter(device=device).order_by("at").last().memory_total_mb == 0


def test_a_gpu_first_seen_without_its_memory_registers_with_an_unknown_size(node: Node) -> None:
    assert _beat(node, MemoryUnreadable([SimGpu(uuid="GPU-bb")])).status_code == 200
    assert Device.objects.get(uuid="GPU-bb").memory_mb == 0

    assert (
        _beat(node, SimulatedNvml([SimGpu(uuid="GPU-bb", memory_total_mb=40960)])).status_code
        == 200
    )
    assert Device.objects.get(uuid="GPU-bb").memory_mb == 40960  # read at last
