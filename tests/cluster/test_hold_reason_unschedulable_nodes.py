"""A job that waits only because its nodes take no new jobs is told so truthfully, whatever
the reason they do not (drained, or down or silent: the policy sees only `schedulable`)."""

from __future__ import annotations

import pytest

from cluster.choices import NodeState
from cluster.models import Node
from jobs.services import JobSpec, job_submit
from scheduler.services import scheduling_round_run
from tests.scheduler.livefixtures import configure_tiresias_rules, simulated_cluster


@pytest.mark.django_db
@pytest.mark.parametrize(
    "state", [NodeState.DOWN, NodeState.SUSPECT, NodeState.DRAINING, NodeState.DRAINED]
)
def test_the_hold_reason_names_every_cause_a_node_takes_no_new_jobs(owner, state) -> None:
    configure_tiresias_rules()
    simulated_cluster(nodes=1, gpus_per_node=4)
    Node.objects.update(state=state, state_reason="No heartbeat for 400 s.")
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "5"], num_gpus=2)
    job = job_submit(owner=owner, spec=spec)

    scheduling_round_run()

    job.refresh_from_db()
    assert job.reason == (
        "NodeDrained: needs 2 × GPU; the nodes that could hold it take no new jobs now"
        " (draining, drained, down or not answering)"
    )
