"""The agent's NVML collector, against the simulated NVML (no Django, no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.node_agent.collector import (
    MAX_NAME,
    MAX_PROCESSES,
    MAX_PROGRESS,
    MAX_XIDS,
    PROGRESS_FILE,
    NvmlCollector,
    job_of_pid_from_proc,
    progress_from_proc,
)
from agents.node_agent.simnvml import SimGpu, SimProcess, SimulatedNvml
from agents.runtimes import progress_file_path

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
    collector = NvmlCollector(
        two_gpus(), job_of={101: (7, 2)}.get, progress_of=lambda pid, job, attempt: None
    )

    report = collector.collect()

    assert report["driver_version"] == "550.90.07"
    assert report["cuda_version"] == "12.4"
    assert report["gpus"] == [
        {
            "index": 0, "uuid": "GPU-0000", "name": "NVIDIA A100-SXM4-80GB", "lost": False,
            "memory_total_mb": 81920, "memory_used_mb": 30000, "utilization_pct": 87,
            "temperature_c": 71, "power_w": 312.5, "ecc_uncorrected": 0, "xid_errors": [],
            "processes": [
                {"pid": 101, "used_memory_mb": 20000, "job_id": 7, "attempt": 2},
                {"pid": 102, "used_memory_mb": 0, "job_id": None, "attempt": None},
            ],
        },
        {
            "index": 1, "uuid": "GPU-0001", "name": "NVIDIA GeForce RTX 3090", "lost": False,
            "memory_total_mb": 24576, "memory_used_mb": 0, "utilization_pct": 0,
            "temperature_c": 35, "power_w": 60.0, "ecc_uncorrected": None, "xid_errors": [],
            "processes": [],
        },
    ]  # fmt: skip
    assert report["jobs"] == []


def test_xid_events_are_reported_on_the_gpu_that_raised_them_until_delivered() -> None:
    nvml = two_gpus()
    collector = NvmlCollector(nvml, job_of=lambda pid: None, progress_of=lambda *args: None)
    nvml.raise_xid("GPU-0001", 79)
    nvml.raise_xid("GPU-0001", 48)

    first, undelivered = collector.collect(), collector.collect()
    collector.delivered()
    after = collector.collect()

    assert [gpu["xid_errors"] for gpu in first["gpus"]] == [[], [79, 48]]
    assert [gpu["xid_errors"] for gpu in undelivered["gpus"]] == [[], [79, 48]]
    assert [gpu["xid_errors"] for gpu in after["gpus"]] == [[], []]


def test_a_gpu_nvml_lost_is_reported_as_lost_with_its_xid_and_the_others_still_read() -> None:
    nvml = two_gpus()
    collector = NvmlCollector(nvml, job_of=lambda pid: None, progress_of=lambda *args: None)
    nvml.raise_xid("GPU-0001", 79)
    nvml.lose("GPU-0001")

    report = collector.collect()

    healthy, lost = report["gpus"]
    assert (healthy["lost"], healthy["utilization_pct"]) == (False, 87)
    assert (lost["uuid"], lost["name"], lost["lost"]) == (
        "GPU-0001",
        "NVIDIA GeForce RTX 3090",
        True,
    )
    assert (lost["xid_errors"], lost["utilization_pct"], lost["processes"]) == ([79], None, [])


def test_a_gpu_lost_before_the_agent_starts_is_left_out() -> None:
    nvml = two_gpus()
    nvml.lose("GPU-0000")

    report = NvmlCollector(nvml, job_of=lambda pid: None, progress_of=lambda *a: None).collect()

    assert [gpu["uuid"] for gpu in report["gpus"]] == ["GPU-0001"]


def test_readings_past_what_the_control_plane_accepts_are_trimmed_not_sent() -> None:
    nvml = SimulatedNvml([SimGpu(uuid="GPU-0", utilization_pct=250, temperature_c=900)])
    nvml.gpus[0].processes = [SimProcess(pid=1000 + i, usedGpuMemory=i * MIB) for i in range(300)]
    owners = {1000: (3, 1)}

    report = NvmlCollector(nvml, job_of=owners.get, progress_of=lambda *a: 1e19).collect()

    (gpu,) = report["gpus"]
    assert (gpu["utilization_pct"], gpu["temperature_c"]) == (None, None)
    assert len(gpu["processes"]) == MAX_PROCESSES
    assert gpu["processes"][0]["job_id"] == 3  # the job's process is kept first
    assert report["jobs"] == []  # progress past 1e18 is no reading


def test_the_agents_limits_are_the_control_planes() -> None:
    from agents.api import serializers

    assert MAX_PROCESSES == serializers.MAX_PROCESSES
    gpu, job = serializers.GpuInput(), serializers.JobProgressInput()
    assert gpu.fields["xid_errors"].max_length == MAX_XIDS
    assert gpu.fields["name"].max_length == MAX_NAME
    assert job.fields["progress"].max_value == MAX_PROGRESS


@pytest.mark.parametrize(
    ("environ", "owner"),
    [
        (b"PATH=/bin\0GPULAB_JOB_ID=42\0GPULAB_ATTEMPT=3\0", (42, 3)),
        (b"GPULAB_JOB_ID=42\0", None),
        (b"GPULAB_JOB_ID=4x2\0GPULAB_ATTEMPT=3\0", None),
        (b"PATH=/bin\0", None),
        (b"GPULAB_JOB_ID=0\0GPULAB_ATTEMPT=1\0", None),  # ids the endpoint would refuse
        (b"GPULAB_JOB_ID=99999999999\0GPULAB_ATTEMPT=1\0", None),
        (b"GPULAB_JOB_ID=7\0GPULAB_ATTEMPT=0\0", None),
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


# --------------------------------------------------------------------------- progress


def test_an_owned_process_reports_its_jobs_progress() -> None:
    asked = []

    def progress_of(pid: int, job_id: int, attempt: int) -> float | None:
        asked.append((pid, job_id, attempt))
        return 1234.5

    report = NvmlCollector(two_gpus(), job_of={101: (7, 2)}.get, progress_of=progress_of).collect()

    assert report["jobs"] == [
        {"job_id": 7, "attempt": 2, "gpu_uuid": "GPU-0000", "progress": 1234.5}
    ]
    assert asked == [(101, 7, 2)]  # unowned pid 102 is never read


def test_an_attempt_without_a_readable_progress_file_has_no_entry() -> None:
    report = NvmlCollector(
        two_gpus(), job_of={101: (7, 2)}.get, progress_of=lambda *args: None
    ).collect()

    assert report["jobs"] == []


def test_an_attempt_on_two_gpus_is_read_once_per_gpu_through_its_first_process_there() -> None:
    nvml = SimulatedNvml(
        [
            SimGpu(uuid="GPU-0", processes=[SimProcess(pid=301, usedGpuMemory=None),
                                            SimProcess(pid=201, usedGpuMemory=None)]),
            SimGpu(uuid="GPU-1", processes=[SimProcess(pid=302, usedGpuMemory=None)]),
        ]
    )  # fmt: skip
    owners = {301: (9, 1), 302: (9, 1), 201: (5, 4)}
    asked = []

    def progress_of(pid: int, job_id: int, attempt: int) -> float | None:
        asked.append(pid)
        return float(pid)

    report = NvmlCollector(nvml, job_of=owners.get, progress_of=progress_of).collect()

    assert report["jobs"] == [
        {"job_id": 5, "attempt": 4, "gpu_uuid": "GPU-0", "progress": 201.0},
        {"job_id": 9, "attempt": 1, "gpu_uuid": "GPU-0", "progress": 301.0},
        {"job_id": 9, "attempt": 1, "gpu_uuid": "GPU-1", "progress": 302.0},
    ]
    assert sorted(asked) == [201, 301, 302]


def test_the_agent_reads_the_path_the_launcher_gives_the_job() -> None:
    assert PROGRESS_FILE.format(job_id=7, attempt=2) == progress_file_path(7, 2)


def job_tmp(proc: Path, pid: int = 555) -> Path:
    """`<proc>/<pid>/root/tmp`: a fake /proc entry whose root is a directory of ours."""
    tmp = proc / str(pid) / "root" / "tmp"
    tmp.mkdir(parents=True)
    return tmp


def test_progress_is_read_from_the_file_inside_the_processs_own_root(tmp_path: Path) -> None:
    (job_tmp(tmp_path) / "gpulab-progress-7-2").write_text("1234.5\n")

    assert progress_from_proc(tmp_path)(555, 7, 2) == 1234.5
    assert progress_from_proc(tmp_path)(555, 7, 3) is None  # another attempt's file
    assert progress_from_proc(tmp_path)(556, 7, 2) is None  # no such process


@pytest.mark.parametrize(
    "content",
    [b"", b"steps: 12\n", b"nan\n", b"inf", b"-3\n", b"\xff\xfe", b"1" * 100, b"12 34"],
)
def test_anything_but_one_finite_non_negative_number_reads_as_none(
    tmp_path: Path, content: bytes
) -> None:
    (job_tmp(tmp_path) / "gpulab-progress-7-2").write_bytes(content)

    assert progress_from_proc(tmp_path)(555, 7, 2) is None


def test_only_the_first_line_counts(tmp_path: Path) -> None:
    (job_tmp(tmp_path) / "gpulab-progress-7-2").write_bytes(b"  42 \nwhatever follows")

    assert progress_from_proc(tmp_path)(555, 7, 2) == 42.0


def test_a_symlinked_progress_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("99\n")
    (job_tmp(tmp_path) / "gpulab-progress-7-2").symlink_to(secret)

    assert progress_from_proc(tmp_path)(555, 7, 2) is None


def test_a_symlinked_tmp_inside_the_job_is_refused(tmp_path: Path) -> None:
    # Inside /proc/<pid>/root an absolute link would resolve against the agent's root.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gpulab-progress-7-2").write_text("99\n")
    (tmp_path / "555" / "root").mkdir(parents=True)
    (tmp_path / "555" / "root" / "tmp").symlink_to(elsewhere)

    assert progress_from_proc(tmp_path)(555, 7, 2) is None


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(job_tmp(tmp_path) / "gpulab-progress-7-2")

    assert progress_from_proc(tmp_path)(555, 7, 2) is None


def test_a_file_owned_by_another_user_than_the_process_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_tmp(tmp_path) / "gpulab-progress-7-2").write_text("1234.5\n")
    process_dir = str(tmp_path / "555")
    real_stat = os.stat

    def stat_as_if_another_user_ran_555(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = real_stat(path, *args, **kwargs)
        if os.fspath(path) != process_dir:
            return result
        fields = list(result)
        fields[4] = result.st_uid + 1  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "stat", stat_as_if_another_user_ran_555)

    assert progress_from_proc(tmp_path)(555, 7, 2) is None


def test_a_real_process_is_read_through_the_real_proc() -> None:
    """No fake tree: a child process writes its progress where the launcher tells it, and
    the agent's default reader finds it through /proc/<pid>/root."""
    job_id, attempt = 900_000 + os.getpid() % 1000, 1
    path = progress_file_path(job_id, attempt)
    script = (
        "import os, time; open(os.environ['GPULAB_PROGRESS_FILE'], 'w').write('42.5\\n'); "
        "time.sleep(30)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "GPULAB_PROGRESS_FILE": path}
    )
    try:
        deadline = time.monotonic() + 5
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert progress_from_proc()(child.pid, job_id, attempt) == 42.5
        assert progress_from_proc()(child.pid, job_id, attempt + 1) is None
    finally:
        child.kill()
        child.wait()
        Path(path).unlink(missing_ok=True)
