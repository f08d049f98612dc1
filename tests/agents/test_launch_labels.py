"""A node's per-GPU limit labels: a bad one fails the launch with the node and label
named, instead of leaving the job STARTING on its GPUs for ever."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.runtimes import LaunchRefused
from agents.services import _launch_spec, agent_launch
from cluster.admin import NodeAdminForm
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Allocation, Job
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, NodeFactory


def _node(labels: Any) -> Node:
    node = NodeFactory(name="gpu-9", labels=labels, runtime="docker")
    DeviceFactory(node=node, index=0)
    return node


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("labels", "named"),
    [
        ({"cpus_per_gpu": "four"}, "cpus_per_gpu='four'"),
        ({"cpus_per_gpu": -2}, "cpus_per_gpu=-2"),
        ({"cpus_per_gpu": True}, "cpus_per_gpu=True"),
        ({"cpus_per_gpu": [4]}, "cpus_per_gpu=[4]"),
        ({"cpus_per_gpu": "nan"}, "cpus_per_gpu='nan'"),
        ({"memory_mb_per_gpu": "16G"}, "memory_mb_per_gpu='16G'"),
        ({"memory_mb_per_gpu": 1.5}, "memory_mb_per_gpu=1.5"),
        # Text, even a number's, is refused as the admin form refuses it.
        ({"cpus_per_gpu": "4"}, "cpus_per_gpu='4'"),
        ({"memory_mb_per_gpu": ""}, "memory_mb_per_gpu=''"),
    ],
)
def test_a_bad_limit_label_fails_the_launch_naming_the_node_and_label(
    labels: dict[str, Any], named: str
) -> None:
    job = started_job(_node(labels), command=["python", "train.py"])

    failed = agent_launch(job_id=job.pk, attempt=job.attempt)  # refused before any SSH

    assert failed is not None and failed.state == JobState.FAILED
    assert f"Node gpu-9 has a bad label {named}" in Job.objects.get(pk=job.pk).reason
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("labels", "cpus", "memory_mb"),
    [
        ({}, None, None),
        ({"cpus_per_gpu": 4, "memory_mb_per_gpu": 16000}, 4.0, 16000),
        ({"cpus_per_gpu": 2.5, "memory_mb_per_gpu": 8000.0}, 2.5, 8000),
        ({"cpus_per_gpu": 0, "memory_mb_per_gpu": None}, None, None),  # no limit
    ],
)
def test_good_limit_labels_set_the_launchs_limits(
    labels: dict[str, Any], cpus: float | None, memory_mb: int | None
) -> None:
    node = _node(labels)
    job = started_job(node, command=["python", "train.py"])

    spec = _launch_spec(job=job, node=node)

    assert (spec.cpus, spec.memory_mb) == (cpus, memory_mb)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "labels",
    [
        {"cpus_per_gpu": 0, "memory_mb_per_gpu": 0},
        {"cpus_per_gpu": None},
        {"cpus_per_gpu": 2.5, "memory_mb_per_gpu": 65536},
        {"cpus_per_gpu": "8"},
        {"cpus_per_gpu": -1},
        {"cpus_per_gpu": False},
        {"memory_mb_per_gpu": 1.5},
        {"memory_mb_per_gpu": "65536"},
        {"memory_mb_per_gpu": 10**400},
    ],
)
def test_the_admin_form_and_the_launch_apply_one_rule_in_the_same_words(
    labels: dict[str, Any],
) -> None:
    node = _node(labels)
    form = NodeAdminForm(
        data={
            "name": node.name,
            "address": node.address,
            "ssh_port": 22,
            "ssh_user": "gpulab",
            "runtime": node.runtime,
            "labels": json.dumps(labels),
        },
        instance=node,
    )
    job = started_job(node, command=["python", "train.py"])
    try:
        _launch_spec(job=job, node=node)
        refusal = ""
    except LaunchRefused as exc:
        refusal = str(exc)

    assert form.is_valid() == (refusal == "")
    for message in form.errors.get("labels", []):
        # "Label cpus_per_gpu must be …." in the form; "… cpus_per_gpu='8': it must be …."
        name, rule = message.removeprefix("Label ").split(" ", 1)
        assert name in refusal and f": it {rule}" in refusal
