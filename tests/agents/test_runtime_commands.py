"""The exact commands built for each runtime (pure: no database, no SSH)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from agents.runtimes import (
    WRAPPER,
    LaunchRefused,
    LaunchSpec,
    apptainer_exec_argv,
    docker_launch_inspect_argv,
    docker_logs_argv,
    docker_run_argv,
    docker_status_argv,
    docker_stop_argv,
    job_environment,
    parse_attempt_name,
    progress_file_path,
    wrapped_launch_script,
    wrapped_program,
)
from agents.services import _launch_script, _parse_docker_status
from cluster.choices import Runtime


def spec(**changes: object) -> LaunchSpec:
    values: dict[str, object] = {
        "job_id": 42,
        "attempt": 3,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py", "--lr", "0.1"],
        "env": {"WANDB_MODE": "offline"},
        "device_uuids": ["GPU-aaaa", "GPU-bbbb"],
        "run_root": "/var/lib/gpulab/runs",
        "labels": {"node": "a100-0"},
    }
    values.update(changes)
    return LaunchSpec(**values)  # type: ignore[arg-type]


def test_docker_run_argv_is_exact() -> None:
    assert docker_run_argv(spec(cpus=16.0, memory_mb=65536)) == [
        "docker", "run", "-d", "--init",
        "--log-driver", "json-file", "--log-opt", "max-size=50m", "--log-opt", "max-file=2",
        "--name", "gpulab-42-3",
        "--label", "gpulab.job=42",
        "--label", "gpulab.attempt=3",
        "--label", "gpulab.node=a100-0",
        "--gpus", '"device=GPU-aaaa,GPU-bbbb"',
        "--cpus", "16",
        "--memory", "65536m",
        "--env", "WANDB_MODE=offline",
        "--env", "GPULAB_JOB_ID=42",
        "--env", "GPULAB_ATTEMPT=3",
        "--env", "GPULAB_IMAGE=nvcr.io/nvidia/pytorch:24.05-py3",
        "--env", "GPULAB_PROGRESS_FILE=/tmp/gpulab-progress-42-3",
        "--env", "TINI_KILL_PROCESS_GROUP=1",
        "nvcr.io/nvidia/pytorch:24.05-py3", "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip


def test_a_cpu_only_docker_job_gets_no_gpus_flag_and_no_limits_unless_set() -> None:
    argv = docker_run_argv(spec(device_uuids=[], env={}, labels={}))
    assert argv == [
        "docker", "run", "-d", "--init",
        "--log-driver", "json-file", "--log-opt", "max-size=50m", "--log-opt", "max-file=2",
        "--name", "gpulab-42-3",
        "--label", "gpulab.job=42", "--label", "gpulab.attempt=3",
        "--env", "GPULAB_JOB_ID=42", "--env", "GPULAB_ATTEMPT=3",
        "--env", "GPULAB_IMAGE=nvcr.io/nvidia/pytorch:24.05-py3",
        "--env", "GPULAB_PROGRESS_FILE=/tmp/gpulab-progress-42-3",
        "--env", "TINI_KILL_PROCESS_GROUP=1",
        "nvcr.io/nvidia/pytorch:24.05-py3", "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


def test_a_docker_stop_reaches_the_whole_process_group_even_behind_a_shell() -> None:
    """`docker stop` signals only the container's PID 1: `--init` makes that Docker's
    tini, and TINI_KILL_PROCESS_GROUP has it pass SIGTERM to the program's process group,
    so train.py under `sh -c 'python train.py; echo done'` gets it too."""
    argv = docker_run_argv(spec(command=["sh", "-c", "python train.py; echo done"]))
    options = argv[: argv.index("nvcr.io/nvidia/pytorch:24.05-py3")]

    assert "--init" in options
    assert "TINI_KILL_PROCESS_GROUP=1" in flag_values(options, "--env")


def test_a_job_cannot_unset_group_signalling_and_it_is_passed_once() -> None:
    argv = docker_run_argv(spec(env={"TINI_KILL_PROCESS_GROUP": "0"}))

    assert [v for v in flag_values(argv, "--env") if v.startswith("TINI_")] == [
        "TINI_KILL_PROCESS_GROUP=1"
    ]


def test_docker_keeps_a_bounded_log_per_container() -> None:
    argv = docker_run_argv(spec())

    assert flag_values(argv, "--log-driver") == ["json-file"]  # whose options these are
    assert flag_values(argv, "--log-opt") == ["max-size=50m", "max-file=2"]


def test_apptainer_argv_is_exact_and_its_environment_travels_as_apptainerenv() -> None:
    assert apptainer_exec_argv(spec()) == [
        "apptainer", "exec", "--nv", "--cleanenv",
        "docker://nvcr.io/nvidia/pytorch:24.05-py3", "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip
    assert wrapped_program(spec(), "apptainer") == [
        "env",
        "APPTAINERENV_WANDB_MODE=offline",
        "APPTAINERENV_CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb",
        "APPTAINERENV_NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb",
        "APPTAINERENV_GPULAB_JOB_ID=42",
        "APPTAINERENV_GPULAB_ATTEMPT=3",
        "APPTAINERENV_GPULAB_IMAGE=nvcr.io/nvidia/pytorch:24.05-py3",
        "APPTAINERENV_GPULAB_PROGRESS_FILE=/tmp/gpulab-progress-42-3",
        "apptainer", "exec", "--nv", "--cleanenv",
        "docker://nvcr.io/nvidia/pytorch:24.05-py3", "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip


def test_process_runtime_pins_the_gpus_with_cuda_visible_devices() -> None:
    assert wrapped_program(spec(), "process") == [
        "env",
        "WANDB_MODE=offline",
        "CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb",
        "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb",
        "GPULAB_JOB_ID=42",
        "GPULAB_ATTEMPT=3",
        "GPULAB_IMAGE=nvcr.io/nvidia/pytorch:24.05-py3",
        "GPULAB_PROGRESS_FILE=/tmp/gpulab-progress-42-3",
        "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip


def test_every_runtime_tells_the_job_where_to_write_its_progress() -> None:
    assert progress_file_path(42, 3) == "/tmp/gpulab-progress-42-3"
    expected = "GPULAB_PROGRESS_FILE=/tmp/gpulab-progress-42-3"

    assert expected in docker_run_argv(spec())
    assert f"APPTAINERENV_{expected}" in wrapped_program(spec(), "apptainer")
    assert expected in wrapped_program(spec(), "process")


def test_gpulab_sets_the_progress_file_over_any_user_value() -> None:
    # Submission refuses GPULAB_* names (so do the argv builders, below); a row written
    # past that check still cannot move where the agent looks.
    environment = job_environment(spec(env={"GPULAB_PROGRESS_FILE": "/etc/shadow"}))
    assert environment["GPULAB_PROGRESS_FILE"] == "/tmp/gpulab-progress-42-3"
    with pytest.raises(LaunchRefused, match="set by gpulab itself"):
        docker_run_argv(spec(env={"GPULAB_PROGRESS_FILE": "/etc/shadow"}))


def test_the_launch_script_passes_user_input_only_as_quoted_arguments_of_a_constant_wrapper() -> (
    None
):
    script = wrapped_launch_script(spec(command=["echo", "$(id)"]), "process")
    start = script.split("{ ", 1)[1].rsplit(" < /dev/null > /dev/null 2>&1 & }", 1)[0]
    words = shlex.split(start)
    assert words[:5] == ["setsid", "sh", "-c", WRAPPER, "gpulab-42-3"]
    assert words[-2:] == ["echo", "$(id)"]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: docker_stop_argv("gpulab-42-3", 30),
            ["docker", "stop", "-t", "30", "gpulab-42-3"],
        ),
        (
            lambda: docker_status_argv("gpulab-42-3"),
            ["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", "gpulab-42-3"],
        ),
        (
            lambda: docker_launch_inspect_argv("gpulab-42-3"),
            [
                "docker",
                "container",
                "inspect",
                "-f",
                "{{.State.Status}} {{.State.ExitCode}} {{.Id}}",
                "gpulab-42-3",
            ],
        ),
        (
            lambda: docker_logs_argv("gpulab-42-3", 100),
            ["docker", "logs", "--tail", "100", "gpulab-42-3"],
        ),
    ],
)
def test_docker_lifecycle_argv_is_exact(build, expected) -> None:  # type: ignore[no-untyped-def]
    assert build() == expected


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"image": "--privileged"}, "image:"),
        ({"image": "ubuntu --network=host"}, "image:"),
        ({"command": []}, "command:"),
        ({"env": {"GPULAB_JOB_ID": "7"}}, "set by gpulab itself"),
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "set by gpulab itself"),
        ({"device_uuids": ["GPU-a,GPU-b"]}, "is not a GPU UUID"),
        ({"device_uuids": ['GPU-a" --privileged "']}, "is not a GPU UUID"),
    ],
)
def test_docker_refuses_specs_that_could_smuggle_flags(changes: dict, message: str) -> None:
    with pytest.raises(LaunchRefused, match=message):
        docker_run_argv(spec(**changes))


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("gpulab-42-3", (42, 3)),
        ("gpulab-1-10", (1, 10)),
        ("gpulab-x-1", None),
        ("other-1-2", None),
        ("gpulab-1-2-3", None),
    ],
)
def test_attempt_names_parse_back_to_job_and_attempt(name: str, parsed: object) -> None:
    assert parse_attempt_name(name) == parsed


@pytest.mark.parametrize(
    ("stdout", "exit_status", "stderr", "state", "exit_code"),
    [
        ("running 0", 0, "", "running", None),
        ("exited 3", 0, "", "exited", 3),
        ("dead 137", 0, "", "exited", 137),
        ("", 1, "Error: No such object: gpulab-7-1", "unknown", None),
        # The daemon restarting says nothing about the job: requeueing on it would send
        # every job of the node back to the queue while its container still runs.
        ("", 1, "Cannot connect to the Docker daemon. Is it running?", "unreadable", None),
        ("garbage", 0, "", "unreadable", None),
    ],
)  # fmt: skip
def test_docker_status_is_unknown_only_when_docker_has_no_such_container(
    stdout: str, exit_status: int, stderr: str, state: str, exit_code: int | None
) -> None:
    status = _parse_docker_status(stdout, exit_status, stderr)
    assert (status.state, status.exit_code) == (state, exit_code)


FAKE_DOCKER = """#!/bin/sh
# `docker run` loses the name to a concurrent delivery that created the container first.
case "$1 $2" in
  "container inspect") [ -e "$STATE/created" ] && echo running 0 c0ffee && exit 0; exit 1 ;;
  "run -d") touch "$STATE/created"; echo "Conflict. The container name is in use" >&2; exit 125 ;;
esac
exit 2
"""


def test_a_docker_launch_that_loses_the_name_to_a_second_delivery_reports_its_container(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(0o755)
    script = _launch_script(spec(), Runtime.DOCKER)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "STATE": str(tmp_path)}

    result = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)

    assert (result.returncode, result.stdout.strip()) == (0, "c0ffee")
