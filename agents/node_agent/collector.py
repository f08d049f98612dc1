"""What a node agent reports: per-GPU metrics from NVML, mapped to gpulab jobs.

Standard library only; `nvml` is the `pynvml` module (nvidia-ml-py) on a GPU node, or a
`SimulatedNvml` (simnvml.py) in tests and the demo, which offers the same calls.
"""

from __future__ import annotations

import math
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

AGENT_VERSION = "1"
MIB = 1024 * 1024

# Which gpulab job owns a process: read from the environment the launcher gives every
# attempt (GPULAB_JOB_ID, GPULAB_ATTEMPT). Docker and Apptainer processes are ordinary
# host processes, so /proc/<pid>/environ shows the same variables for all three runtimes.
JobOf = Callable[[int], "tuple[int, int] | None"]


def job_of_pid_from_proc(proc_root: str | os.PathLike[str] = "/proc") -> JobOf:
    def job_of(pid: int) -> tuple[int, int] | None:
        try:
            raw = (Path(proc_root) / str(pid) / "environ").read_bytes()
        except OSError:  # gone, or another user's process (run the agent as root)
            return None
        variables = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        job, attempt = variables.get(b"GPULAB_JOB_ID"), variables.get(b"GPULAB_ATTEMPT")
        if job is None or attempt is None or not (job.isdigit() and attempt.isdigit()):
            return None
        return int(job), int(attempt)

    return job_of


# How far a job has got: the cumulative work count (steps, samples...) it writes, as one
# number, to the file named by GPULAB_PROGRESS_FILE. This is the path as the job sees it;
# `agents.runtimes.progress_file_path` builds the same one, but the agent cannot import
# the control plane, so the format is repeated here (a test checks that both agree).
PROGRESS_FILE = "/tmp/gpulab-progress-{job_id}-{attempt}"
PROGRESS_MAX_BYTES = 64

ProgressOf = Callable[[int, int, int], "float | None"]  # (pid, job_id, attempt)


def progress_from_proc(proc_root: str | os.PathLike[str] = "/proc") -> ProgressOf:
    """Read a job's progress file through `<proc_root>/<pid>/root`, the process's own view
    of the filesystem: its container's /tmp for docker, the host's for apptainer and
    plain processes.

    The agent runs as root and the path is the user's, so the file is opened as carefully
    as a hostile one: no symlinks (for /tmp inside the job's root, which would otherwise
    be resolved against the agent's root, nor for the file itself), no blocking on a FIFO,
    only a regular file owned by the process's own user (a job reports only what it wrote
    itself), and a few bytes at most. Anything else reads as None; it never raises.
    """

    def progress_of(pid: int, job_id: int, attempt: int) -> float | None:
        process_dir = Path(proc_root) / str(pid)
        tmp_dir, name = PROGRESS_FILE.format(job_id=job_id, attempt=attempt).rsplit("/", 1)
        try:
            owner = os.stat(process_dir).st_uid
            directory = os.open(
                process_dir / "root" / tmp_dir.lstrip("/"),
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
            )
        except OSError:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        except OSError:
            return None
        finally:
            os.close(directory)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != owner:
                return None
            raw = os.read(fd, PROGRESS_MAX_BYTES)
        except OSError:
            return None
        finally:
            os.close(fd)
        return parse_progress(raw)

    return progress_of


def parse_progress(raw: bytes) -> float | None:
    """The first line as a finite, non-negative number, or None."""
    line, newline, _ = raw.partition(b"\n")
    if not newline and len(raw) >= PROGRESS_MAX_BYTES:
        return None  # the number runs past what we read: never report a truncated one
    try:
        value = float(line.strip().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCollector:
    """Reads every GPU once per `collect()`; Xid errors arrive as NVML events in between."""

    def __init__(
        self, nvml: Any, *, job_of: JobOf | None = None, progress_of: ProgressOf | None = None
    ) -> None:
        self.nvml = nvml
        self.job_of = job_of or job_of_pid_from_proc()
        self.progress_of = progress_of or progress_from_proc()
        nvml.nvmlInit()
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())
        ]
        self.events = self._try(nvml.nvmlEventSetCreate)
        if self.events is not None:
            for handle in self.handles:
                self._try(
                    nvml.nvmlDeviceRegisterEvents,
                    handle,
                    nvml.nvmlEventTypeXidCriticalError,
                    self.events,
                )

    def _try(self, call: Callable[..., Any], *args: Any) -> Any:
        """None where a GPU does not support a reading (ECC on GeForce cards, say)."""
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def _xid_events(self) -> dict[str, list[int]]:
        """Drain pending Xid events without waiting: uuid → Xid codes seen."""
        seen: dict[str, list[int]] = {}
        if self.events is None:
            return seen
        while True:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError:
                return seen  # NVML_ERROR_TIMEOUT: nothing (more) pending
            uuid = _text(self.nvml.nvmlDeviceGetUUID(event.device))
            seen.setdefault(uuid, []).append(int(event.eventData))

    def node_facts(self) -> dict[str, Any]:
        nvml = self.nvml
        cuda = self._try(nvml.nvmlSystemGetCudaDriverVersion)
        return {
            "hostname": socket.gethostname(),
            "agent_version": AGENT_VERSION,
            "driver_version": _text(self._try(nvml.nvmlSystemGetDriverVersion) or ""),
            # NVML encodes CUDA 12.4 as 12040.
            "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "",
        }

    def collect(self) -> dict[str, Any]:
        """One heartbeat's payload: node facts, one entry per GPU, and the progress of
        each attempt running here that reports one."""
        nvml = self.nvml
        xids = self._xid_events()
        gpus = []
        first_pid: dict[tuple[int, int], int] = {}  # attempt → a pid to read its file through
        for index, handle in enumerate(self.handles):
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
            rates = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
            power_mw = self._try(nvml.nvmlDeviceGetPowerUsage, handle)
            processes = []
            for process in self._try(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []:
                owner = self.job_of(int(process.pid))
                if owner is not None:
                    first_pid.setdefault(owner, int(process.pid))
                used = process.usedGpuMemory  # None when the driver cannot tell
                processes.append(
                    {
                        "pid": int(process.pid),
                        "used_memory_mb": int(used) // MIB if used else 0,
                        "job_id": owner[0] if owner else None,
                        "attempt": owner[1] if owner else None,
                    }
                )
            gpus.append(
                {
                    "index": index,
                    "uuid": uuid,
                    "name": _text(nvml.nvmlDeviceGetName(handle)),
                    "memory_total_mb": int(memory.total) // MIB if memory else 0,
                    "memory_used_mb": int(memory.used) // MIB if memory else 0,
                    "utilization_pct": int(rates.gpu) if rates else None,
                    "temperature_c": self._try(
                        nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
                    ),
                    "power_w": round(power_mw / 1000.0, 1) if power_mw is not None else None,
                    "ecc_uncorrected": self._try(
                        nvml.nvmlDeviceGetTotalEccErrors,
                        handle,
                        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        nvml.NVML_VOLATILE_ECC,
                    ),
                    "xid_errors": xids.get(uuid, []),
                    "processes": processes,
                }
            )
        jobs = []
        for (job_id, attempt), pid in sorted(first_pid.items()):
            progress = self.progress_of(pid, job_id, attempt)
            if progress is not None:
                jobs.append({"job_id": job_id, "attempt": attempt, "progress": progress})
        return {**self.node_facts(), "gpus": gpus, "jobs": jobs}
