"""job_submit: every validation rule with a bad input, and a rejection writes nothing."""

from __future__ import annotations

import dataclasses

import pytest

from cluster.models import Node
from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.models import Job, JobEvent
from jobs.services import JobSpec, job_submit

GOOD = JobSpec(image="pytorch/pytorch:2.4.0-cuda12.1", command=["python", "train.py"], num_gpus=2)


def reject(user, **changes) -> dict[str, list[str]]:
    """Submit GOOD with `changes`; assert it is refused and nothing was written."""
    jobs, events = Job.objects.count(), JobEvent.objects.count()
    with pytest.raises(ValidationFailed) as caught:
        job_submit(owner=user, spec=dataclasses.replace(GOOD, **changes))
    assert (Job.objects.count(), JobEvent.objects.count()) == (jobs, events)
    return caught.value.errors


@pytest.mark.django_db
def test_a_good_submission_is_stored_pending_with_its_first_event(owner, small_cluster):
    job = job_submit(owner=owner, spec=dataclasses.replace(GOOD, accepted_types=["a100", "v100"]))
    assert job.state == JobState.PENDING
    assert (job.group.name, job.name, job.command) == (
        "vision",
        "python train.py",
        ["python", "train.py"],
    )
    assert job.accepted_types == ["a100", "v100"]
    assert job.events.get().to_state == JobState.PENDING


@pytest.mark.parametrize(
    "image",
    [
        "",
        "Ubuntu",
        "ubuntu:",
        "bad image",
        "ubuntu;rm -rf /",
        "a" * 300,
        "ubuntu@sha256:123",
        None,
        7,
    ],
)
@pytest.mark.django_db
def test_it_rejects_a_bad_image_reference(owner, small_cluster, image):
    assert "image" in reject(owner, image=image)


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu",
        "ubuntu:22.04",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "localhost:5000/lab/train:v1",
        "ghcr.io/org/repo/img@sha256:" + "a" * 64,
    ],
)
@pytest.mark.django_db
def test_it_accepts_real_image_references(owner, small_cluster, image):
    assert job_submit(owner=owner, spec=dataclasses.replace(GOOD, image=image)).image == image


@pytest.mark.parametrize(
    "command",
    [[], "python train.py", ["python", 3], [""], ["python", "a\x00b"], None, {"argv": ["x"]}],
)
@pytest.mark.django_db
def test_it_rejects_a_command_that_is_not_a_nonempty_argv_list(owner, small_cluster, command):
    assert "command" in reject(owner, command=command)


@pytest.mark.django_db
def test_shell_metacharacters_stay_literal_arguments(owner, small_cluster):
    argv = ["sh", "-c", "echo $(id); rm -rf / `x` 'q' \"d\"\nnext"]
    assert job_submit(owner=owner, spec=dataclasses.replace(GOOD, command=argv)).command == argv


@pytest.mark.parametrize(
    "env",
    [
        {"lower": "x"},
        {"1ABC": "x"},
        {"A-B": "x"},
        {"OK": 5},
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        {"GPULAB_JOB": "x"},
        ["A=1"],
        {"NUL": "a\x00"},
    ],
)
@pytest.mark.django_db
def test_it_rejects_bad_environment_variables(owner, small_cluster, env):
    assert "env" in reject(owner, env=env)


@pytest.mark.parametrize("num_gpus", [-1, 1.5, "2", True, None])
@pytest.mark.django_db
def test_it_rejects_a_gpu_count_that_is_not_a_whole_number_from_zero(
    owner, small_cluster, num_gpus
):
    assert "num_gpus" in reject(owner, num_gpus=num_gpus)


@pytest.mark.parametrize(
    ("simulated", "changes", "message"),
    [
        # Real nodes launch a job on one node, so every job must fit one node.
        (False, {"num_gpus": 5}, "at most 4 of one type (any type) exist on one node"),
        (False, {"num_gpus": 3, "accepted_types": ["v100"]}, "at most 2 of one type (v100)"),
        # A demo cluster may spread a job over nodes, but never over device types: 8 a100s
        # and 2 v100s give no job 10.
        (True, {"num_gpus": 9}, "at most 8 of one type (any type) exist in the whole cluster"),
        (True, {"num_gpus": 9, "accepted_types": ["a100"]}, "at most 8 of one type (a100)"),
        (True, {"num_gpus": 5, "consolidation": "required"}, "at most 4 of one type (any type) "),
    ],
)
@pytest.mark.django_db
def test_it_rejects_more_gpus_than_the_cluster_could_ever_give(
    owner, small_cluster, simulated, changes, message
):
    Node.objects.update(simulated=simulated)
    errors = reject(owner, **changes)
    assert message in errors["num_gpus"][0]


@pytest.mark.django_db
def test_the_largest_grantable_request_is_accepted(owner, small_cluster):
    spec = dataclasses.replace(GOOD, num_gpus=4, consolidation="required", accepted_types=["a100"])
    assert job_submit(owner=owner, spec=spec).num_gpus == 4


@pytest.mark.django_db
def test_a_job_without_gpus_is_refused_and_nothing_is_stored(owner, small_cluster):
    # A job with no devices has no node to launch on; it used to sit in STARTING for ever.
    assert reject(owner, num_gpus=0) == {"num_gpus": ["Must be at least 1."]}


@pytest.mark.parametrize(
    ("types", "fragment"),
    [
        (["h100"], "Unknown device type(s): h100"),
        (["a100", "a100"], "listed twice"),
        ("a100", "list"),
    ],
)
@pytest.mark.django_db
def test_it_rejects_unknown_or_malformed_device_types(owner, small_cluster, types, fragment):
    assert fragment in " ".join(reject(owner, accepted_types=types)["accepted_types"])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("consolidation", "sometimes"),
        ("walltime_seconds", 5),
        ("walltime_seconds", "1h"),
        ("max_retries", 99),
        ("name", "x" * 200),
    ],
)
@pytest.mark.django_db
def test_it_rejects_bad_scalars_naming_the_field(owner, small_cluster, field, value):
    assert field in reject(owner, **{field: value})


@pytest.mark.django_db
def test_it_rejects_a_group_the_owner_does_not_belong_to(owner, outsider, small_cluster):
    assert "not a member" in reject(owner, group="nlp")["group"][0]


@pytest.mark.django_db
def test_a_default_group_the_owner_has_left_is_not_charged(owner, vision, nlp, small_cluster):
    owner.default_group = nlp  # e.g. set while alice was in nlp, then she left it
    owner.save()
    assert job_submit(owner=owner, spec=GOOD).group == vision
    nlp.members.add(owner)
    assert job_submit(owner=owner, spec=GOOD).group == nlp


@pytest.mark.django_db
def test_every_bad_field_is_reported_at_once(owner, small_cluster):
    errors = reject(owner, image="Bad", command=[], env={"x": "1"}, num_gpus=-1)
    assert {"image", "command", "env", "num_gpus"} <= set(errors)


@pytest.mark.django_db
def test_the_users_pending_quota_is_enforced(owner, small_cluster):
    owner.max_pending_jobs = 2
    owner.save()
    job_submit(owner=owner, spec=GOOD)
    job_submit(owner=owner, spec=GOOD)
    assert "user alice already has 2 pending jobs (max 2)" in reject(owner)["quota"][0]


@pytest.mark.django_db
def test_the_groups_pending_quota_counts_every_member(owner, teammate, vision, small_cluster):
    vision.max_pending_jobs = 1
    vision.save()
    job_submit(owner=teammate, spec=GOOD)
    assert "group vision" in reject(owner)["quota"][0]


@pytest.mark.django_db
def test_a_finished_job_does_not_count_against_the_pending_quota(owner, small_cluster):
    owner.max_pending_jobs = 1
    owner.save()
    job = job_submit(owner=owner, spec=GOOD)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    assert job_submit(owner=owner, spec=GOOD).state == JobState.PENDING


@pytest.mark.django_db
def test_a_job_larger_than_the_users_gpu_cap_is_refused(owner, vision, small_cluster):
    owner.max_gpus = 1
    owner.save()
    assert "QuotaExceeded: user alice may use at most 1 GPUs" in reject(owner)["num_gpus"][0]
    owner.max_gpus = None
    owner.save()
    vision.max_gpus = 1
    vision.save()
    assert "group vision" in reject(owner)["num_gpus"][0]
