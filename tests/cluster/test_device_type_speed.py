"""A device type's speed is bounded: a huge or subnormal one used to fail every round."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from accounts.models import User
from cluster.models import SPEED_MAX, SPEED_MIN, SPEED_RANGE_TEXT, DeviceType
from cluster.services import device_type_upsert
from config.errors import ValidationFailed
from jobs.services import JobSpec, job_submit
from scheduler.services import scheduling_round_run
from tests.scheduler.livefixtures import age_job, simulated_cluster

pytestmark = pytest.mark.django_db
ADD = reverse("admin:cluster_devicetype_add")


@pytest.fixture
def admin_client(client, lab_admin: User):  # type: ignore[no-untyped-def]
    client.force_login(lab_admin)
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize("speed", ["0", "-1", "1e308", "1000.5", "0.0009", "1e-320"])
def test_the_admin_refuses_a_speed_out_of_range_naming_the_field(admin_client, speed) -> None:
    response = admin_client.post(ADD, {"name": "h100", "display_name": "", "speed": speed})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"speed": [SPEED_RANGE_TEXT]}
    assert not DeviceType.objects.exists()


@pytest.mark.parametrize("speed", ["0.001", "1000"])
def test_the_admin_takes_the_bounds_themselves(admin_client, speed: str) -> None:
    response = admin_client.post(ADD, {"name": "h100", "display_name": "", "speed": speed})

    assert response.status_code == 302
    assert DeviceType.objects.get(name="h100").speed == float(speed)


@pytest.mark.parametrize("speed", [1e308, 0.0, float("nan"), float("inf")])
def test_the_upsert_service_refuses_it_too(speed: float) -> None:
    with pytest.raises(ValidationFailed) as caught:
        device_type_upsert(name="h100", speed=speed)
    assert caught.value.errors == {"speed": [SPEED_RANGE_TEXT]}


def test_the_database_refuses_it_whatever_the_path() -> None:
    device_type = device_type_upsert(name="h100", speed=2.0)
    with pytest.raises(IntegrityError), transaction.atomic():
        DeviceType.objects.filter(pk=device_type.pk).update(speed=1e308)


@pytest.mark.parametrize("speed", [SPEED_MIN, SPEED_MAX])
def test_rounds_and_the_queue_api_work_at_either_bound(
    owner, outsider, client, lab_admin, speed: float
) -> None:
    simulated_cluster(nodes=1, gpus_per_node=4)
    DeviceType.objects.update(speed=speed)
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "99999"], num_gpus=4)
    long_job = job_submit(owner=owner, spec=spec)
    assert scheduling_round_run().outcome == "applied"
    age_job(long_job.pk, seconds=30 * 86400)  # a month on four GPUs at this speed
    job_submit(owner=outsider, spec=JobSpec(image="pytorch/pytorch:2.4.0", command=["x"]))

    assert scheduling_round_run().outcome == "applied"
    client.force_login(lab_admin)
    assert client.get("/api/v1/queue/").status_code == 200
    assert client.get("/api/v1/fairness/").status_code == 200
