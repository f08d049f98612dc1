"""A cordoned GPU's faults no longer drain its node: an admin took it out of service, and
the node serves with its healthy GPUs (`cluster.services.device_cordon`)."""

from __future__ import annotations

import pytest

from agents.models import GpuSample
from agents.node_agent.simnvml import SimGpu
from cluster.choices import NodeState
from cluster.models import Device, Node
from cluster.services import device_cordon
from tests.agents.test_agent_faults import Agent

pytestmark = pytest.mark.usefixtures("fresh_rate_limits")


def test_a_cordoned_gpus_faults_no_longer_drain_its_node(node: Node) -> None:
    agent = Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")])
    agent.beat()
    device_cordon(device_id=Device.objects.get(uuid="GPU-bb").pk, reason="Xid 79")
    agent.nvml.raise_xid("GPU-bb", 79)
    agent.nvml.lose("GPU-bb")

    agent.beat()

    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.UP, "")
    agent.nvml.raise_xid("GPU-aa", 79)  # a healthy GPU's fault still drains it
    agent.beat()
    node.refresh_from_db()
    assert node.state == NodeState.DRAINED
    assert "GPU 0 (GPU-aa)" in node.state_reason and "GPU-bb" not in node.state_reason


def test_a_cordoned_gpu_missing_from_the_report_does_not_drain_its_node(node: Node) -> None:
    Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")]).beat()
    device_cordon(device_id=Device.objects.get(uuid="GPU-bb").pk, reason="off the bus")

    Agent(node, [SimGpu(uuid="GPU-aa")]).beat()

    node.refresh_from_db()
    assert node.state == NodeState.UP
    assert GpuSample.objects.filter(device__uuid="GPU-aa").count() == 2
