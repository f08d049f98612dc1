"""Shared by the walltime and retry tests: long-running jobs on a simulated 4-GPU node."""

from __future__ import annotations

import pytest

from jobs.models import Job
from jobs.services import JobSpec, job_submit
from tests.scheduler.livefixtures import configure, simulated_cluster


def submit_long_job(user, gpus: int = 2, *, walltime: int | None = None, retries: int = 0) -> Job:  # type: ignore[no-untyped-def]
    """A job whose `sleep` outlasts any test, so the simulated agent never finishes it."""
    return job_submit(
        owner=user,
        spec=JobSpec(
            image="pytorch/pytorch:2.4.0",
            command=["sleep", "1000000"],
            num_gpus=gpus,
            walltime_seconds=walltime,
            max_retries=retries,
        ),
    )


@pytest.fixture
def cluster(db):  # type: ignore[no-untyped-def]
    configure(placement="best-fit")
    return simulated_cluster(nodes=1, gpus_per_node=4)
