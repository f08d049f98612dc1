"""What a node agent reports: per-GPU metrics from NVML, mapped to gpulab jobs.

Standard library only; `nvml` is the `pynvml` module (nvidia-ml-py) on a GPU node, or a
`SimulatedNvml` (simnvml.py) in tests and the demo, which offers the same calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("gpulab.node_agent")

# 2: progress readings name the GPU they were read through; a GPU NVML lost is reported.
AGENT_VERSION = "2"
MIB = 1024 * 1024
NVML_ERROR_GPU_IS_LOST = 15  # pynvml.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_FUNCTION_NOT_FOUND = 13  # pynvml.NVML_ERROR_FUNCTION_NOT_FOUND

# Which processes use a GPU, newest call first. pynvml's unversioned call is the newest
# struct version it knows (`_v3` in nvidia-ml-py 11.510 and later), a symbol NVIDIA drivers
# before 510 lack: pynvml then raises NVMLLibraryMismatchError (not an NVMLError). `_v2`,
# which those drivers answer, returns the same fields.
COMPUTE_PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)

# What the control plane accepts (agents/api/serializers.py; a test checks that both
# agree). One value past them and the whole heartbeat is refused, the node's liveness
# with it, so the agent trims to them instead: never a reason to take a node down.
MAX_PROCESSES = 256
MAX_XIDS = 1000
MAX_PROGRESS = 1e18
MAX_NAME = 128
MAX_COUNT = 2**31 - 1  # PostgreSQL integer

# Which gpulab job owns a process: read from the environment the launcher gives every
# attempt (GPULAB_JOB_ID, GPULAB_ATTEMPT). Docker and Apptainer processes are ordinary
# host processes, so /proc/<pid>/environ shows the same variables for all three runtimes.
JobOf = Callable[[int], "tuple[int, int] | None"]


def job_of_pid_from_proc(proc_root: str | os.PathLike[str] = "/proc") -> JobOf:
    warned = False

    def job_of(pid: int) -> tuple[int, int] | None:
        nonlocal warned
        try:
            raw = (Path(proc_root) / str(pid) / "environ").read_bytes()
        except PermissionError:
            # Another user's process: docker jobs run as root, so an agent that is not
            # root sees their GPU use unowned and reads no progress, silently. Said once,
            # not on every heartbeat.
            if not warned:
                warned = True
                logger.warning(
                    "Cannot read %s/%d/environ (permission denied): GPU processes of other "
                    "users are reported without their job, and their progress is not read. "
                    "Run the agent as root (required on docker nodes).",
                    proc_root,
                    pid,
                )
            return None
        except OSError:  # the process is gone
            return None
        variables = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        job, attempt = variables.get(b"GPULAB_JOB_ID"), variables.get(b"GPULAB_ATTEMPT")
        if job is None or attempt is None or not (job.isdigit() and attempt.isdigit()):
            return None
        # Any user can set these in their own process: an id no job can have (0, or past
        # the database's integer) would have the whole heartbeat refused.
        if not (1 <= int(job) <= MAX_COUNT and 1 <= int(attempt) <= MAX_COUNT):
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


def _within(value: Any, low: float, high: float) -> Any:
    """`value` if NVML's reading is plausible, else None (a glitch is no reading)."""
    return value if value is not None and low <= value <= high else None


def _handle_key(handle: Any) -> int:
    """A device handle's identity: pynvml hands out a new ctypes pointer per call (an
    event's device is not the object the agent holds), so compare what it points at."""
    try:
        return ctypes.addressof(handle.contents)
    except (AttributeError, TypeError, ValueError):
        return id(handle)


class GpuLost(Exception):
    """NVML can no longer reach a GPU (NVML_ERROR_GPU_IS_LOST: fallen off the bus)."""


@dataclass(frozen=True)
class _Gpu:
    index: int
    handle: Any
    uuid: str  # read once: a lost GPU cannot be asked any more
    name: str


class NvmlCollector:
    """Reads every GPU once per `collect()`; Xid errors arrive as NVML events in between.

    A GPU NVML loses is reported as `lost` (under the UUID it had), so the control plane
    drains the node with the reason; one the agent cannot even enumerate is left out, and
    the control plane, which knows the node's GPUs, drains it as missing. Xid codes stay
    in the next payload until a heartbeat carrying them is delivered (`delivered`).
    """

    def __init__(
        self, nvml: Any, *, job_of: JobOf | None = None, progress_of: ProgressOf | None = None
    ) -> None:
        self.nvml = nvml
        self.job_of = job_of or job_of_pid_from_proc()
        self.progress_of = progress_of or progress_from_proc()
        self.process_calls = list(COMPUTE_PROCESS_CALLS)  # those this NVML may still answer
        self.failed_calls: set[str] = set()  # logged once each
        nvml.nvmlInit()
        self.gpus: list[_Gpu] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = self._try(nvml.nvmlDeviceGetHandleByIndex, index)
                uuid = self._try(nvml.nvmlDeviceGetUUID, handle) if handle is not None else None
                name = self._try(nvml.nvmlDeviceGetName, handle) if uuid is not None else None
            except GpuLost:
                uuid = None
            if uuid is None:
                logger.error("GPU %d cannot be read; it is left out of the reports.", index)
                continue
            name = _text(name)[:MAX_NAME] if name else "unknown GPU"
            self.gpus.append(_Gpu(index=index, handle=handle, uuid=_text(uuid), name=name))
        self.uuid_of_handle = {_handle_key(gpu.handle): gpu.uuid for gpu in self.gpus}
        self.undelivered_xids: dict[str, list[int]] = {}
        self.events = self._try(nvml.nvmlEventSetCreate)
        if self.events is not None:
            for gpu in self.gpus:
                with contextlib.suppress(GpuLost):  # collect() reports it
                    self._try(
                        nvml.nvmlDeviceRegisterEvents,
                        gpu.handle,
                        nvml.nvmlEventTypeXidCriticalError,
                        self.events,
                    )

    def _try(self, call: Callable[..., Any], *args: Any) -> Any:
        """None where a GPU does not support a reading (ECC on GeForce cards, say) or the
        reading fails in any other way; GpuLost where NVML has lost the GPU itself.

        Every reading is optional: one that fails must cost that value, never the whole
        heartbeat (and with it the node's liveness).
        """
        try:
            return call(*args)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from exc
            return None
        except Exception as exc:  # NVMLLibraryMismatchError, a driver/pynvml mismatch...
            self._log_once(getattr(call, "__name__", repr(call)), exc)
            return None

    def _log_once(self, name: str, exc: BaseException) -> None:
        if name not in self.failed_calls:
            self.failed_calls.add(name)
            logger.warning(
                "NVML %s failed (%s: %s); reported as no reading.", name, type(exc).__name__, exc
            )

    def _compute_processes(self, handle: Any) -> list[Any] | None:
        """The processes using a GPU, through the newest call this NVML answers; None
        when it cannot tell. GpuLost where NVML has lost the GPU."""
        nvml = self.nvml
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())  # absent from old pynvml
        while self.process_calls:
            name = self.process_calls[0]
            call = getattr(nvml, name, None)
            if call is not None:
                try:
                    return call(handle)
                except nvml.NVMLError as exc:
                    value = getattr(exc, "value", None)
                    if value == NVML_ERROR_GPU_IS_LOST:
                        raise GpuLost(str(exc)) from exc
                    if value != NVML_ERROR_FUNCTION_NOT_FOUND:
                        return None  # this GPU cannot tell now; the next beat asks again
                except mismatch:
                    pass
                except Exception as exc:
                    self._log_once(name, exc)
                    return None
            # Not in this driver's NVML (older than the pynvml): never ask it again.
            logger.warning("This NVML has no %s (an NVIDIA driver before 510?).", name)
            self.process_calls.pop(0)
        return None

    def _xid_events(self) -> None:
        """Drain pending Xid events without waiting into `undelivered_xids` (uuid → codes)."""
        if self.events is None:
            return
        while True:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing (more) pending
            except Exception as exc:  # never the reason a heartbeat is not sent
                self._log_once("nvmlEventSetWait_v2", exc)
                return
            uuid = self.uuid_of_handle.get(_handle_key(event.device))
            if uuid is None:
                logger.error("Xid %s on a GPU the agent does not know", event.eventData)
                continue
            codes = self.undelivered_xids.setdefault(uuid, [])
            if len(codes) < MAX_XIDS:
                codes.append(int(event.eventData))

    def delivered(self) -> None:
        """The last payload reached the control plane: its Xid codes are reported."""
        self.undelivered_xids.clear()

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
        each attempt running here that reports one.

        Progress is read once per attempt and GPU, through the first of the attempt's
        processes on that GPU, and names the GPU: the control plane takes a reading only
        through a GPU the attempt holds, so a process elsewhere that claims another job's
        identity in its environment cannot report for it.
        """
        self._xid_events()
        gpus = []
        first_pid: dict[tuple[int, int, str], int] = {}  # (job, attempt, GPU uuid) → pid
        for gpu in self.gpus:
            try:
                entry = self._gpu_reading(gpu, first_pid)
            except GpuLost as exc:
                logger.error("GPU %d (%s) is lost: %s", gpu.index, gpu.uuid, exc)
                entry = {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "name": gpu.name,
                    "lost": True,
                    "memory_total_mb": 0,
                    "memory_used_mb": 0,
                    "utilization_pct": None,
                    "temperature_c": None,
                    "power_w": None,
                    "ecc_uncorrected": None,
                    "processes": [],
                }
            entry["xid_errors"] = list(self.undelivered_xids.get(gpu.uuid, []))
            gpus.append(entry)
        jobs = []
        for (job_id, attempt, uuid), pid in sorted(first_pid.items()):
            progress = _within(self.progress_of(pid, job_id, attempt), 0, MAX_PROGRESS)
            if progress is not None and len(jobs) < MAX_PROCESSES:
                jobs.append(
                    {"job_id": job_id, "attempt": attempt, "gpu_uuid": uuid, "progress": progress}
                )
        return {**self.node_facts(), "gpus": gpus, "jobs": jobs}

    def _gpu_reading(self, gpu: _Gpu, first_pid: dict[tuple[int, int, str], int]) -> dict:
        nvml, handle = self.nvml, gpu.handle
        memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
        rates = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = self._try(nvml.nvmlDeviceGetPowerUsage, handle)
        ecc = self._try(
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        processes = []
        for process in self._compute_processes(handle) or []:
            pid = int(process.pid)
            owner = self.job_of(pid)
            if owner is not None:
                first_pid.setdefault((owner[0], owner[1], gpu.uuid), pid)
            used = process.usedGpuMemory  # None when the driver cannot tell
            processes.append(
                {
                    "pid": pid,
                    "used_memory_mb": min(int(used) // MIB, MAX_COUNT) if used else 0,
                    "job_id": owner[0] if owner else None,
                    "attempt": owner[1] if owner else None,
                }
            )
        # Past the control plane's limit, keep the jobs' processes, largest first.
        processes.sort(key=lambda p: (p["job_id"] is None, -p["used_memory_mb"], p["pid"]))
        return {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "name": gpu.name,
            "lost": False,
            # 0 where NVML could not read it: no GPU has 0 MiB, so the control plane takes
            # 0 for "no reading" and keeps the size it registered. Not null, which control
            # planes up to now refuse, with the whole heartbeat (readings and faults).
            "memory_total_mb": min(int(memory.total) // MIB, MAX_COUNT) if memory else 0,
            "memory_used_mb": min(int(memory.used) // MIB, MAX_COUNT) if memory else 0,
            "utilization_pct": _within(int(rates.gpu), 0, 100) if rates else None,
            "temperature_c": _within(
                self._try(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
                -50,
                200,
            ),
            "power_w": (
                _within(round(power_mw / 1000.0, 1), 0, 5000) if power_mw is not None else None
            ),
            "ecc_uncorrected": min(ecc, MAX_COUNT) if ecc is not None else None,
            "processes": processes[:MAX_PROCESSES],
        }
