"""`snapshot_build` tells the policy which jobs are still starting and which GPUs are
cordoned, so it neither preempts a job the state machine cannot preempt yet nor tells a
user to change a request that an uncordon would serve."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.services import device_cordon
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_start, job_submit
from scheduler.core.types import Snapshot
from scheduler.policies import decide
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.snapshot import snapshot_build
from tests.scheduler.livefixtures import age_job, configure_tiresias_rules, simulated_cluster

pytestmark = pytest.mark.django_db


def _submit(owner, gpus: int) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "5"], num_gpus=gpus)
    return job_submit(owner=owner, spec=spec)


def _build() -> Snapshot:
    settings = scheduler_settings_from(scheduler_config_get())
    return snapshot_build(now=timezone.now(), settings=settings)[0]


@pytest.mark.parametrize("state", [JobState.STARTING, JobState.RUNNING])
def test_a_job_still_starting_is_not_preempted_however_long_ago_it_was_allocated(
    owner, state: JobState
) -> None:  # type: ignore[no-untyped-def]
    configure_tiresias_rules()
    gpu = simulated_cluster(nodes=1, gpus_per_node=1)[0]
    veteran = job_start(job_id=_submit(owner, 1).pk, device_ids=[gpu.pk])  # STARTING
    Job.objects.filter(pk=veteran.pk).update(state=state)
    age_job(veteran.pk, seconds=2 * 3600)  # an image pull that takes two hours
    newcomer = _submit(owner, 1)

    snapshot = _build()
    decisions = decide(snapshot)

    assert snapshot.job_by_id[veteran.pk].starting == (state == JobState.STARTING)
    if state == JobState.RUNNING:  # the control: Tiresias preempts the 2-hour job
        assert [p.job_id for p in decisions.preemptions] == [veteran.pk]
        return
    assert decisions.preemptions == ()
    assert [h.job_id for h in decisions.holds] == [newcomer.pk]


def test_a_cordoned_gpu_nobody_holds_is_in_the_snapshot_out_of_service(owner) -> None:  # type: ignore[no-untyped-def]
    configure_tiresias_rules()
    gpus = simulated_cluster(nodes=1, gpus_per_node=4)
    device_cordon(device_id=gpus[0].pk, reason="Xid 79")
    whole_node = _submit(owner, 4)

    snapshot = _build()
    decisions = decide(snapshot)

    in_service = {d.id: d.schedulable for d in snapshot.devices}
    assert in_service == {gpus[0].pk: False, **{g.pk: True for g in gpus[1:]}}
    assert [str(h.reason) for h in decisions.holds if h.job_id == whole_node.pk] == [
        "NodeDrained: needs 4 × GPU; GPUs it needs are out of service (cordoned by an admin)"
    ]
