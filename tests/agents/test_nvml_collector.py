"""The agent's NVML collector, against the simulated NVML (no Django, no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.node_agent.collector import NvmlCollector, job_of_pid_from_proc
from agents.node_agent.simnvml import SimGpu, SimProcess, SimulatedNvml

MIB = 1024 * 1024


def two_gpus() -> SimulatedNvml:
    return SimulatedNvml(
        [
            SimGpu(
                uuid="GPU-0000", memory_used_mb=30000, utilization_pct=87, temperature_c=71,
                power_mw=312_500, ecc_uncorrected=0,
                processes=[SimProcess(pid=101, usedGpuMemory=20000 * MIB),
                           SimProcess(pid=102, usedGpuMemory=None)],
            ),
            SimGpu(uuid="GPU-0001", name="NVIDIA GeForce RTX 3090", memory_total_mb=24576,
                   ecc_uncorrected=None),
        ]
    )  # fmt: skip


def test_it_reports_every_gpu_with_its_readings_in_the_agreed_units() -> None:
    collector = NvmlCollector(two_gpus(), job_of={101: (7, 2)}.get)

    report = collector.collect()

    assert report["driver_version"] == "550.90.07"
    assert report["cuda_version"] == "12.4"
    assert report["gpus"] == [
        {
            "index": 0, "uuid": "GPU-0000", "name": "NVIDIA A100-SXM4-80GB",
            "memory_total_mb": 81920, "memory_used_mb": 30000, "utilization_pct": 87,
            "temperature_c": 71, "power_w": 312.5, "ecc_uncorrected": 0, "xid_errors": [],
            "processes": [
                {"pid": 101, "used_memory_mb": 20000, "job_id": 7, "attempt": 2},
                {"pid": 102, "used_memory_mb": 0, "job_id": None, "attempt": None},
            ],
        },
        {
            "index": 1, "uuid": "GPU-0001", "name": "NVIDIA GeForce RTX 3090",
            "memory_total_mb": 24576, "memory_used_mb": 0, "utilization_pct": 0,
            "temperature_c": 35, "power_w": 60.0, "ecc_uncorrected": None, "xid_errors": [],
            "processes": [],
        },
    ]  # fmt: skip


def test_xid_events_are_reported_once_on_the_gpu_that_raised_them() -> None:
    nvml = two_gpus()
    collector = NvmlCollector(nvml, job_of=lambda pid: None)
    nvml.raise_xid("GPU-0001", 79)
    nvml.raise_xid("GPU-0001", 48)

    first, second = collector.collect(), collector.collect()

    assert [gpu["xid_errors"] for gpu in first["gpus"]] == [[], [79, 48]]
    assert [gpu["xid_errors"] for gpu in second["gpus"]] == [[], []]


@pytest.mark.parametrize(
    ("environ", "owner"),
    [
        (b"PATH=/bin\0GPULAB_JOB_ID=42\0GPULAB_ATTEMPT=3\0", (42, 3)),
        (b"GPULAB_JOB_ID=42\0", None),
        (b"GPULAB_JOB_ID=4x2\0GPULAB_ATTEMPT=3\0", None),
        (b"PATH=/bin\0", None),
        (None, None),  # the process is gone, or not readable
    ],
)
def test_processes_map_to_their_job_through_the_launchers_environment(
    tmp_path: Path, environ: bytes | None, owner: tuple[int, int] | None
) -> None:
    if environ is not None:
        (tmp_path / "555").mkdir()
        (tmp_path / "555" / "environ").write_bytes(environ)
    assert job_of_pid_from_proc(tmp_path)(555) == owner
