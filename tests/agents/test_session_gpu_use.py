"""Per-job GPU use of a GPU its holder does not touch (agents.heartbeats._job_samples):
a notebook whose kernel never used CUDA holds its GPU at 0 %, and must be judged idle."""

from __future__ import annotations

import pytest

from agents.models import JobGpuSample
from agents.node_agent.simnvml import SimGpu, SimProcess, SimulatedNvml
from jobs.services import job_mark_running
from tests.agents.conftest import started_job
from tests.agents.test_heartbeat_api import beat

pytestmark = pytest.mark.usefixtures("fresh_rate_limits")
JUPYTER = ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"]


def test_a_held_gpu_without_any_process_is_recorded_as_the_holders(node):
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa", utilization_pct=0)])
    beat(node, nvml)
    job = started_job(node, command=JUPYTER)
    job_mark_running(job_id=job.pk)
    beat(node, nvml)
    assert list(
        JobGpuSample.objects.values_list("job_id", "utilization_pct", "memory_used_mb")
    ) == [(job.pk, 0, 0)]


def test_processes_nobody_can_attribute_record_nothing(node):
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa", utilization_pct=80)])
    beat(node, nvml)
    job = started_job(node, command=["python", "train.py"])
    job_mark_running(job_id=job.pk)
    nvml.gpus[0].processes = [SimProcess(pid=1, usedGpuMemory=1 << 30)]
    beat(node, nvml, job_of=lambda pid: None)
    assert not JobGpuSample.objects.exists()


def test_a_job_still_starting_records_nothing(node):
    """Pulling its image, a job has no process on its GPU: no sign of idleness."""
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa", utilization_pct=0)])
    beat(node, nvml)
    started_job(node, command=JUPYTER)  # STARTING
    beat(node, nvml)
    assert not JobGpuSample.objects.exists()
