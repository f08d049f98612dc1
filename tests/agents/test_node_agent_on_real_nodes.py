"""The node agent on the nodes a lab really has: NVIDIA drivers older than pynvml, an
NVML reading that fails in a way nobody foresaw, an agent that is not root, and a node
without pynvml or a driver at all."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from agents.node_agent.__main__ import main, run
from agents.node_agent.collector import COMPUTE_PROCESS_CALLS, NvmlCollector, job_of_pid_from_proc
from agents.node_agent.simnvml import NVMLLibraryMismatchError, SimGpu, SimProcess, SimulatedNvml
from cluster.models import Node
from tests.agents.test_heartbeat_api import ClientSession

MIB = 1024 * 1024


def busy_gpu() -> SimGpu:
    return SimGpu(
        uuid="GPU-0000", utilization_pct=91,
        processes=[SimProcess(pid=101, usedGpuMemory=2048 * MIB)],
    )  # fmt: skip


def test_on_a_driver_before_510_the_processes_are_read_through_the_v2_call() -> None:
    """pynvml's unversioned call asks for `_v3`, which a 470 driver lacks, and raises
    NVMLLibraryMismatchError (not an NVMLError): the agent asks `_v2` instead."""
    nvml = SimulatedNvml([busy_gpu()], driver="470.256.02")
    collector = NvmlCollector(nvml, job_of={101: (7, 2)}.get, progress_of=lambda *a: None)

    first, second = collector.collect(), collector.collect()

    expected = [{"pid": 101, "used_memory_mb": 2048, "job_id": 7, "attempt": 2}]
    assert first["gpus"][0]["processes"] == second["gpus"][0]["processes"] == expected
    assert collector.process_calls == [COMPUTE_PROCESS_CALLS[1]]  # not asked again


def test_a_node_with_a_driver_before_510_delivers_its_heartbeats(
    node: Node, fresh_rate_limits: None
) -> None:
    from agents.heartbeats import node_agent_token_create

    _, key = node_agent_token_create(node_id=node.pk)
    collector = NvmlCollector(
        SimulatedNvml([busy_gpu()], driver="470.256.02"), job_of=lambda pid: None
    )

    delivered = run(collector, ClientSession(), url="http://cp", token=key, interval=0, beats=2)

    assert delivered == 2
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None


class MismatchedNvml(SimulatedNvml):
    """Readings that fail with what pynvml raises besides NVMLError."""

    def nvmlDeviceGetPowerUsage(self, handle: SimGpu) -> int:
        raise NVMLLibraryMismatchError("no nvmlDeviceGetPowerUsage_v2 here")

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        raise RuntimeError("an event reading nobody foresaw")


def test_a_reading_that_fails_unforeseen_costs_that_value_not_the_heartbeat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    collector = NvmlCollector(
        MismatchedNvml([busy_gpu()]), job_of=lambda pid: None, progress_of=lambda *a: None
    )

    with caplog.at_level(logging.WARNING, logger="gpulab.node_agent"):
        first, second = collector.collect(), collector.collect()

    for report in (first, second):
        (gpu,) = report["gpus"]
        assert (gpu["power_w"], gpu["utilization_pct"], gpu["lost"]) == (None, 91, False)
    said = [record.getMessage() for record in caplog.records]
    assert sum("nvmlDeviceGetPowerUsage" in line for line in said) == 1  # once, not per beat
    assert sum("nvmlEventSetWait_v2" in line for line in said) == 1


def test_an_agent_that_may_not_read_a_process_environment_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A docker job's processes are root's: an agent that is not root cannot read their
    environment, so it cannot tell whose GPU use it sees. Root reads anything, so the
    refusal is simulated."""
    for pid in (11, 12):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(b"GPULAB_JOB_ID=7\0GPULAB_ATTEMPT=1\0")
    read_bytes = Path.read_bytes

    def refuse_environ(path: Path) -> bytes:
        if path.name == "environ":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refuse_environ)
    job_of = job_of_pid_from_proc(tmp_path)

    with caplog.at_level(logging.WARNING, logger="gpulab.node_agent"):
        owners = [job_of(11), job_of(12), job_of(11)]

    assert owners == [None, None, None]
    (warning,) = [r.getMessage() for r in caplog.records if "permission denied" in r.getMessage()]
    assert "Run the agent as root" in warning


def test_a_process_that_is_gone_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gpulab.node_agent"):
        assert job_of_pid_from_proc(tmp_path)(404) is None

    assert caplog.records == []


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("k")
    return path


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("gpulab-node-agent: ")
    return line


def test_without_pynvml_the_agent_says_what_to_install(
    token_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError

    assert main(["--url", "http://cp", "--token-file", str(token_file), "--once"]) == 1
    line = one_line_error(capsys)
    assert "pip install nvidia-ml-py" in line
    # Debian 12's pip refuses the system Python (externally-managed-environment).
    assert "node_bootstrap --python" in line


def test_without_the_nvidia_driver_the_agent_says_what_to_install(
    token_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pynvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def nvml_init() -> None:
        raise NVMLError("NVML Shared Library Not Found")  # pynvml without libnvidia-ml.so.1

    pynvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    pynvml.nvmlInit = nvml_init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)

    assert main(["--url", "http://cp", "--token-file", str(token_file), "--once"]) == 1
    line = one_line_error(capsys)
    assert "NVML Shared Library Not Found" in line
    assert "install the NVIDIA driver" in line


def test_an_unreadable_token_file_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"

    assert main(["--url", "http://cp", "--token-file", str(missing), "--simulated-gpus", "1"]) == 1
    assert str(missing) in one_line_error(capsys)
