"""User input never reaches a shell: hostile argv, env and image bytes stay literal data."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.services import agent_launch, agent_logs_tail, agent_node_poll
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Job
from tests.agents.conftest import started_job, wait_for


def hostile_values(marker: Path) -> list[str]:
    return [
        f"; touch {marker}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"'; touch {marker}; echo '",
        f'"; touch {marker}; echo "',
        f"x\ntouch {marker}\n",
        f"&& touch {marker} || touch {marker} | touch {marker} > {marker}",
        "${HOME} $HOME \\ * ?",
    ]


def _finish(node: Node, job_id: int) -> Job:
    def finished() -> Job | None:
        agent_node_poll(node_id=node.pk)
        job = Job.objects.get(pk=job_id)
        return job if job.state in {JobState.SUCCEEDED, JobState.FAILED} else None

    return wait_for(finished)


def test_hostile_arguments_arrive_as_literal_bytes(ssh_node: Node, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    values = hostile_values(marker)
    job = started_job(ssh_node, command=["printf", "[%s]\\n", *values])

    agent_launch(job_id=job.pk, attempt=job.attempt)

    assert _finish(ssh_node, job.pk).exit_code == 0
    assert agent_logs_tail(job_id=job.pk) == "".join(f"[{value}]\n" for value in values)
    assert not marker.exists()


def test_hostile_environment_values_arrive_as_literal_bytes(ssh_node: Node, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    values = hostile_values(marker)
    env = {f"EVIL_{number}": value for number, value in enumerate(values)}
    job = started_job(
        ssh_node,
        command=["sh", "-c", 'for n in $(seq 0 7); do printenv "EVIL_$n"; echo "<end>"; done'],
        env=env,
    )

    agent_launch(job_id=job.pk, attempt=job.attempt)

    assert _finish(ssh_node, job.pk).exit_code == 0
    assert agent_logs_tail(job_id=job.pk) == "".join(f"{value}\n<end>\n" for value in values)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("image", "ubuntu; touch {marker}", "image:"),
        ("image", "$(touch {marker})", "image:"),
        ("command", ["VAR=x", "touch", "{marker}"], "may not contain '='"),
        ("env", {"X; touch {marker}": "1"}, "is not a variable name"),
        ("env", {"CUDA_VISIBLE_DEVICES": "0,1"}, "set by gpulab itself"),
    ],
)
def test_a_job_that_cannot_be_launched_safely_fails_with_a_clear_reason(
    ssh_node: Node, tmp_path: Path, ssh_settings: Path, field: str, value: object, message: str
) -> None:
    marker = tmp_path / "pwned"

    def fill(item: object) -> object:
        if isinstance(item, str):
            return item.format(marker=marker)
        if isinstance(item, list):
            return [fill(part) for part in item]
        return {fill(k): fill(v) for k, v in item.items()}  # type: ignore[union-attr]

    fields = {"command": ["true"], "env": {}, field: fill(value)}
    job = started_job(ssh_node, **fields)

    failed = agent_launch(job_id=job.pk, attempt=job.attempt)

    assert failed is not None and failed.state == JobState.FAILED
    assert message in failed.reason
    assert not marker.exists()
    assert not ssh_settings.exists(), "a refused job must not touch the node"
