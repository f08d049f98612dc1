"""A simulated NVML: the calls `NvmlCollector` makes, over GPUs held in plain objects.

The only test double for NVML (tests and the demo's simulated nodes). It mirrors
pynvml's names, units (bytes, milliwatts, CUDA version as 12040) and error behaviour
(`NVMLError`, a timeout when no event is pending), so the collector cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
nvmlEventTypeXidCriticalError = 8
MIB = 1024 * 1024


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class NVMLLibraryMismatchError(Exception):
    """What pynvml raises for an unversioned call whose newest symbol the driver lacks."""


@dataclass
class SimProcess:
    pid: int
    usedGpuMemory: int | None  # bytes, named as in pynvml


@dataclass
class SimGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total_mb: int = 81920
    memory_used_mb: int = 0
    utilization_pct: int = 0
    memory_utilization_pct: int = 0
    temperature_c: int = 35
    power_mw: int = 60000
    ecc_uncorrected: int | None = 0  # None: ECC not supported (GeForce)
    processes: list[SimProcess] = field(default_factory=list)
    lost: bool = False  # fallen off the bus: every call about it fails


@dataclass
class _Memory:
    total: int
    used: int
    free: int


@dataclass
class _Rates:
    gpu: int
    memory: int


@dataclass
class _Event:
    device: SimGpu
    eventData: int
    eventType: int = nvmlEventTypeXidCriticalError


class SimulatedNvml:
    """Stands in for the `pynvml` module: `NvmlCollector(SimulatedNvml([...]))`."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError

    def __init__(self, gpus: list[SimGpu], *, driver: str = "550.90.07", cuda: int = 12040) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.initialized = False
        self._pending: list[_Event] = []
        self._registered: set[str] = set()

    # Test controls -----------------------------------------------------------------
    def raise_xid(self, uuid: str, xid: int) -> None:
        """The driver reports Xid `xid` on that GPU (e.g. 79: fell off the bus)."""
        gpu = next(gpu for gpu in self.gpus if gpu.uuid == uuid)
        if uuid in self._registered:
            self._pending.append(_Event(gpu, xid))

    def lose(self, uuid: str) -> None:
        """The GPU falls off the bus: from now on NVML answers GPU_IS_LOST about it."""
        next(gpu for gpu in self.gpus if gpu.uuid == uuid).lost = True

    # pynvml's calls --------------------------------------------------------------------
    def _check(self) -> None:
        if not self.initialized:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED

    def _reachable(self, handle: SimGpu) -> SimGpu:
        if handle.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return handle

    def nvmlInit(self) -> None:
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimGpu:
        self._check()
        return self._reachable(self.gpus[index])

    def nvmlDeviceGetName(self, handle: SimGpu) -> str:
        self._reachable(handle)
        return handle.name

    def nvmlDeviceGetUUID(self, handle: SimGpu) -> str:
        self._reachable(handle)
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: SimGpu) -> _Memory:
        self._reachable(handle)
        total, used = handle.memory_total_mb * MIB, handle.memory_used_mb * MIB
        return _Memory(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: SimGpu) -> _Rates:
        self._reachable(handle)
        return _Rates(gpu=handle.utilization_pct, memory=handle.memory_utilization_pct)

    def nvmlDeviceGetTemperature(self, handle: SimGpu, sensor: int) -> int:
        self._reachable(handle)
        return handle.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: SimGpu) -> int:
        self._reachable(handle)
        return handle.power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: SimGpu, error_type: int, counter: int) -> int:
        self._reachable(handle)
        if handle.ecc_uncorrected is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.ecc_uncorrected

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimGpu) -> list[SimProcess]:
        # pynvml calls the `_v3` symbol, which drivers before 510 do not have.
        major = self.driver.split(".")[0]
        if major.isdigit() and int(major) < 510:
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML "
                "lib version. Either use matching pyNVML and NVML lib versions or use a "
                "versioned function such as nvmlDeviceGetComputeRunningProcesses_v2"
            )
        return self.nvmlDeviceGetComputeRunningProcesses_v2(handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: SimGpu) -> list[SimProcess]:
        self._reachable(handle)
        return list(handle.processes)

    def nvmlEventSetCreate(self) -> object:
        self._check()
        return object()

    def nvmlDeviceRegisterEvents(self, handle: SimGpu, event_types: int, event_set: object) -> None:
        self._registered.add(handle.uuid)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> _Event:
        if not self._pending:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        return self._pending.pop(0)
