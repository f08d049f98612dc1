"""One sick GPU out of service without draining its node: an admin cordons it, nothing new
starts on it, a job running there finishes, and its faults no longer drain the node."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import AuditEntry
from cluster.models import Device
from cluster.services import device_cordon, device_uncordon
from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import JobSpec, job_start, job_submit
from scheduler.services import _devices_refusing_starts, scheduling_round_run
from tests.scheduler.livefixtures import age_job, configure_tiresias_rules, simulated_cluster

pytestmark = pytest.mark.django_db


def _submit(owner, gpus: int) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "5"], num_gpus=gpus)
    return job_submit(owner=owner, spec=spec)


def test_cordoning_writes_who_and_why_once_and_uncordoning_clears_it(lab_admin) -> None:  # type: ignore[no-untyped-def]
    gpu = simulated_cluster(nodes=1, gpus_per_node=2)[1]

    device_cordon(device_id=gpu.pk, reason="  Xid 79  twice ", by=lab_admin)
    device_cordon(device_id=gpu.pk, reason="again", by=lab_admin)  # cordoned already

    gpu.refresh_from_db()
    assert gpu.cordoned_at is not None
    assert gpu.cordon_reason == f"Cordoned by {lab_admin.username}: Xid 79 twice"
    entries = AuditEntry.objects.filter(target_kind=AuditEntry.TargetKind.DEVICE)
    assert [(e.field, e.old_value, e.new_value, e.actor_id) for e in entries] == [
        ("cordoned", "no", "yes: Xid 79 twice", lab_admin.pk)
    ]
    device_uncordon(device_id=gpu.pk, by=lab_admin)
    gpu.refresh_from_db()
    assert (gpu.cordoned_at, gpu.cordon_reason) == (None, "")
    assert entries.all().count() == 2  # a fresh query: `entries` holds its first result


def test_a_cordon_needs_a_reason(lab_admin) -> None:  # type: ignore[no-untyped-def]
    gpu = simulated_cluster(nodes=1, gpus_per_node=1)[0]
    with pytest.raises(ValidationFailed) as refused:
        device_cordon(device_id=gpu.pk, reason="   ", by=lab_admin)
    assert "reason" in refused.value.errors
    assert Device.objects.get(pk=gpu.pk).cordoned_at is None


def test_nothing_starts_on_a_cordoned_gpu_and_a_job_needing_it_says_why(owner) -> None:  # type: ignore[no-untyped-def]
    configure_tiresias_rules()
    gpus = simulated_cluster(nodes=1, gpus_per_node=4)
    device_cordon(device_id=gpus[0].pk, reason="Xid 79")
    small, whole_node = _submit(owner, 3), _submit(owner, 4)

    scheduling_round_run()

    small.refresh_from_db()
    whole_node.refresh_from_db()
    assert small.state == JobState.STARTING
    assert gpus[0].pk not in set(small.allocations.values_list("device_id", flat=True))
    assert whole_node.state == JobState.PENDING
    # Not TypeUnavailable (change the request): an admin putting the GPU back fixes it.
    assert whole_node.reason == (
        "NodeDrained: needs 4 × GPU; GPUs it needs are out of service (cordoned by an admin)"
    )

    device_uncordon(device_id=gpus[0].pk)
    Job.objects.filter(pk=small.pk).update(state=JobState.CANCELLED)
    now = timezone.now()
    small.allocations.update(ended_at=now, released_at=now)
    scheduling_round_run()
    whole_node.refresh_from_db()
    assert whole_node.state == JobState.STARTING  # back in service


def test_a_job_running_on_a_gpu_that_is_cordoned_runs_on(owner) -> None:  # type: ignore[no-untyped-def]
    configure_tiresias_rules()
    gpus = simulated_cluster(nodes=1, gpus_per_node=2)
    running = job_start(job_id=_submit(owner, 1).pk, device_ids=[gpus[0].pk])
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
    device_cordon(device_id=gpus[0].pk, reason="ECC errors")
    waiting = _submit(owner, 1)

    scheduling_round_run()

    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    waiting.refresh_from_db()
    assert list(waiting.allocations.values_list("device_id", flat=True)) == [gpus[1].pk]


@pytest.mark.parametrize("rules", ["tiresias", "default"])
def test_a_job_on_a_cordoned_gpu_is_not_preempted_for_a_gpu_nobody_may_use(owner, rules) -> None:  # type: ignore[no-untyped-def]
    if rules == "tiresias":
        configure_tiresias_rules()
    gpu = simulated_cluster(nodes=1, gpus_per_node=1)[0]
    veteran = job_start(job_id=_submit(owner, 1).pk, device_ids=[gpu.pk])
    Job.objects.filter(pk=veteran.pk).update(state=JobState.RUNNING)
    age_job(veteran.pk, seconds=2 * 3600)  # two hours in: Tiresias would preempt it
    device_cordon(device_id=gpu.pk, reason="Xid 79")
    newcomer = _submit(owner, 1)

    result = scheduling_round_run()

    assert Job.objects.get(pk=veteran.pk).state == JobState.RUNNING
    newcomer.refresh_from_db()
    assert newcomer.state == JobState.PENDING
    assert newcomer.reason.startswith("NodeDrained")
    assert result.preemptions == 0


def test_the_apply_step_refuses_a_start_on_a_gpu_cordoned_after_the_snapshot() -> None:
    gpus = simulated_cluster(nodes=1, gpus_per_node=2)
    device_cordon(device_id=gpus[1].pk, reason="Xid 79")

    assert _devices_refusing_starts({gpus[0].pk, gpus[1].pk}) == {gpus[1].pk}


# --------------------------------------------------------------------------- the page


def test_an_admin_cordons_and_uncordons_from_the_cluster_page(lab_admin) -> None:  # type: ignore[no-untyped-def]
    gpu = simulated_cluster(nodes=1, gpus_per_node=2)[1]
    client = Client()
    client.force_login(lab_admin)
    page = client.get("/cluster/").content.decode()
    assert f'action="/cluster/gpus/{gpu.pk}/cordon/"' in page

    client.get(f"/cluster/gpus/{gpu.pk}/cordon/")  # a GET changes nothing
    assert Device.objects.get(pk=gpu.pk).cordoned_at is None
    empty = client.post(f"/cluster/gpus/{gpu.pk}/cordon/", {"reason": ""}, follow=True)
    assert "not cordoned. Reason: This field is required." in empty.content.decode()
    done = client.post(f"/cluster/gpus/{gpu.pk}/cordon/", {"reason": "Xid 79"}, follow=True)

    text = done.content.decode()
    assert "GPU 1 of sim0 is cordoned" in text
    assert "Cordoned by" in text and "Xid 79" in text
    assert f'action="/cluster/gpus/{gpu.pk}/uncordon/"' in text
    counts = client.get("/api/v1/cluster/").json()["counts"]
    assert (counts["free"], counts["out_of_service"]) == (1, 1)
    client.post(f"/cluster/gpus/{gpu.pk}/uncordon/")
    assert Device.objects.get(pk=gpu.pk).cordoned_at is None


def test_a_student_sees_a_cordoned_gpu_but_cannot_cordon_or_uncordon(owner) -> None:  # type: ignore[no-untyped-def]
    gpus = simulated_cluster(nodes=1, gpus_per_node=2)
    device_cordon(device_id=gpus[1].pk, reason="Xid 79")
    client = Client()
    client.force_login(owner)

    page = client.get("/cluster/").content.decode()
    assert "cordoned" in page and "/cordon/" not in page and "/uncordon/" not in page
    assert client.post(f"/cluster/gpus/{gpus[0].pk}/cordon/", {"reason": "x"}).status_code == 403
    assert client.post(f"/cluster/gpus/{gpus[1].pk}/uncordon/").status_code == 403
    assert client.post("/cluster/gpus/999999/cordon/", {"reason": "x"}).status_code == 403
    assert Device.objects.get(pk=gpus[0].pk).cordoned_at is None
    assert Device.objects.get(pk=gpus[1].pk).cordoned_at is not None
    devices = client.get("/api/v1/cluster/").json()["nodes"][0]["devices"]
    assert [d["cordoned"] for d in devices] == [False, True]
