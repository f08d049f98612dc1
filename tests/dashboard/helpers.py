"""Helpers shared by the dashboard tests: logged-in clients, devices, jobs holding GPUs."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from cluster.models import Device
from jobs.choices import JobState
from jobs.models import Allocation, Job
from tests.factories import JobFactory


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def device(small_cluster, node_name: str, index: int) -> Device:
    return next(d for d in small_cluster if d.node.name == node_name and d.index == index)


def hold(owner, devices, *, group=None, start=None, end=None, state=JobState.RUNNING) -> Job:
    """A job of `owner` that held (or holds, without `end`) `devices` from `start`."""
    start = start or timezone.now() - timedelta(minutes=30)
    job = JobFactory(
        owner=owner, group=group, state=state, num_gpus=len(devices), attempt=1, started_at=start
    )
    for one in devices:
        Allocation.objects.create(job=job, attempt=1, device=one, started_at=start, ended_at=end)
    return job
