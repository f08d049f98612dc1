"""The Nodes admin form: bad input is refused naming the field (or label, or device row),
never a 500; device indexes may be swapped in one save."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from accounts.models import User
from cluster.models import Device, DeviceType, Node
from tests.factories import DeviceFactory, DeviceTypeFactory, NodeFactory

pytestmark = pytest.mark.django_db
ADD = reverse("admin:cluster_node_add")
CPUS = "Label cpus_per_gpu must be a positive number of CPUs, e.g. 8 or 2.5 (0 for no limit)."
MEMORY = (
    "Label memory_mb_per_gpu must be a positive whole number of MiB, e.g. 65536 (0 for no limit)."
)


def _form(name: str = "gpu9", **fields: str) -> dict[str, str]:
    data = {
        "name": name,
        "address": "10.0.0.9",
        "ssh_port": "22",
        "ssh_user": "gpulab",
        "runtime": "docker",
        "labels": "{}",
        "devices-TOTAL_FORMS": "0",
        "devices-INITIAL_FORMS": "0",
        "devices-MIN_NUM_FORMS": "0",
        "devices-MAX_NUM_FORMS": "1000",
    }
    data.update(fields)
    return data


def _device_row(
    row: int, *, index: int, uuid: str, device_type: DeviceType, device: Device | None = None
) -> dict[str, str]:
    prefix = f"devices-{row}-"
    data = {
        f"{prefix}index": str(index),
        f"{prefix}uuid": uuid,
        f"{prefix}kind": "gpu",
        f"{prefix}model_name": "",
        f"{prefix}device_type": str(device_type.pk),
        f"{prefix}memory_mb": "0",
    }
    if device is not None:
        data[f"{prefix}id"] = str(device.pk)
        data[f"{prefix}node"] = str(device.node_id)
    return data


def _errors(response: Any) -> dict[str, Any]:
    """The node form's field errors, each device row's, and the formset's own."""
    assert response.status_code == 200, response.status_code
    formset = response.context["inline_admin_formsets"][0].formset
    return {
        "node": {k: list(v) for k, v in response.context["adminform"].form.errors.items()},
        "rows": [{k: list(v) for k, v in form.errors.items()} for form in formset.forms],
        "formset": list(formset.non_form_errors()),
    }


@pytest.fixture
def admin_client(client, lab_admin: User):  # type: ignore[no-untyped-def]
    client.force_login(lab_admin)
    client.raise_request_exception = False  # a 500 must show as a status, not a traceback
    return client


@pytest.fixture
def a100(db: None) -> DeviceType:
    return DeviceTypeFactory(name="a100")


def test_two_new_devices_with_one_index_are_refused_naming_the_row(admin_client, a100) -> None:
    data = _form(**{"devices-TOTAL_FORMS": "2"})
    data |= _device_row(0, index=0, uuid="GPU-a", device_type=a100)
    data |= _device_row(1, index=0, uuid="GPU-b", device_type=a100)

    errors = _errors(admin_client.post(ADD, data))

    assert errors["rows"][0] == {}
    assert errors["rows"][1] == {
        "index": [
            "Index 0 is already given to device row 1; each device of a node needs its own index."
        ]
    }
    assert not Node.objects.filter(name="gpu9").exists()


def _two_devices(a100: DeviceType) -> tuple[Node, Device, Device]:
    node = NodeFactory(name="gpu20")
    first = DeviceFactory(node=node, index=0, uuid="GPU-x", device_type=a100)
    second = DeviceFactory(node=node, index=1, uuid="GPU-y", device_type=a100)
    return node, first, second


def _change(node: Node, rows: list[tuple[Device, int]], a100: DeviceType) -> dict[str, str]:
    data = _form(
        name=node.name,
        **{"devices-TOTAL_FORMS": str(len(rows)), "devices-INITIAL_FORMS": str(len(rows))},
    )
    for row, (device, index) in enumerate(rows):
        data |= _device_row(row, index=index, uuid=device.uuid, device_type=a100, device=device)
    return data


def test_two_devices_may_swap_their_indexes_in_one_save(admin_client, a100) -> None:
    node, first, second = _two_devices(a100)
    url = reverse("admin:cluster_node_change", args=[node.pk])

    response = admin_client.post(url, _change(node, [(first, 1), (second, 0)], a100))

    assert response.status_code == 302
    assert dict(Device.all_objects.values_list("uuid", "index")) == {"GPU-x": 1, "GPU-y": 0}
    assert not Device.all_objects.filter(retired_at__isnull=False).exists()


def test_an_index_moved_onto_another_devices_is_refused(admin_client, a100) -> None:
    node, first, second = _two_devices(a100)
    url = reverse("admin:cluster_node_change", args=[node.pk])

    errors = _errors(admin_client.post(url, _change(node, [(first, 1), (second, 1)], a100)))

    assert errors["rows"][1]["index"][0].startswith("Index 1 is already given to device row 1")
    assert dict(Device.all_objects.values_list("uuid", "index")) == {"GPU-x": 0, "GPU-y": 1}


def test_a_device_may_take_the_index_of_one_deleted_in_the_same_save(admin_client, a100) -> None:
    node, first, second = _two_devices(a100)
    data = _change(node, [(first, 0), (second, 0)], a100)
    data["devices-0-DELETE"] = "on"

    response = admin_client.post(reverse("admin:cluster_node_change", args=[node.pk]), data)

    assert response.status_code == 302
    assert list(Device.all_objects.values_list("uuid", "index")) == [("GPU-y", 0)]


def test_a_new_device_with_a_retired_gpus_uuid_is_refused_naming_the_field(
    admin_client, a100
) -> None:
    node, first, second = _two_devices(a100)
    retired = DeviceFactory(node=node, index=5, uuid="GPU-old", device_type=a100)
    Device.objects.filter(pk=retired.pk).update(retired_at="2026-01-01T00:00:00Z")
    data = _change(node, [(first, 0), (second, 1)], a100)
    data |= _device_row(2, index=2, uuid="GPU-old", device_type=a100)
    data["devices-TOTAL_FORMS"] = "3"

    errors = _errors(admin_client.post(reverse("admin:cluster_node_change", args=[node.pk]), data))

    assert errors["rows"][2] == {"uuid": ["GPU-old is already registered as gpu20/5 (retired)."]}


@pytest.mark.parametrize("port", ["0", "70000"])
def test_an_ssh_port_out_of_range_is_refused_naming_the_field(admin_client, port: str) -> None:
    errors = _errors(admin_client.post(ADD, _form(ssh_port=port)))

    assert list(errors["node"]) == ["ssh_port"]


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("[1, 2]", 'Enter a JSON object, e.g. {"cpus_per_gpu": 8, "memory_mb_per_gpu": 65536}.'),
        ('"gpu"', 'Enter a JSON object, e.g. {"cpus_per_gpu": 8, "memory_mb_per_gpu": 65536}.'),
        ('{"cpus_per_gpu": "four"}', CPUS),
        ('{"cpus_per_gpu": "8"}', CPUS),  # a number, not text: the launch refuses text too
        ('{"cpus_per_gpu": -0.5}', CPUS),
        ('{"cpus_per_gpu": true}', CPUS),
        ('{"cpus_per_gpu": 1e999}', "Enter plain JSON numbers: NaN and Infinity cannot be stored."),
        ('{"rack": NaN}', "Enter plain JSON numbers: NaN and Infinity cannot be stored."),
        ('{"memory_mb_per_gpu": "16G"}', MEMORY),
        ('{"memory_mb_per_gpu": 1.5}', MEMORY),
        ('{"memory_mb_per_gpu": -1}', MEMORY),
        ('{"memory_mb_per_gpu": ""}', MEMORY),
        ('{"memory_mb_per_gpu": 1' + "0" * 400 + "}", MEMORY),  # past any float
    ],
)
def test_bad_labels_are_refused_naming_the_label(admin_client, labels: str, message: str) -> None:
    errors = _errors(admin_client.post(ADD, _form(labels=labels)))

    assert errors["node"] == {"labels": [message]}
    assert not Node.objects.filter(name="gpu9").exists()


@pytest.mark.parametrize(
    ("labels", "stored"),
    [
        (
            '{"cpus_per_gpu": 2.5, "memory_mb_per_gpu": 65536, "rack": "r1"}',
            {"cpus_per_gpu": 2.5, "memory_mb_per_gpu": 65536, "rack": "r1"},
        ),
        # 0 or null: no limit, as the launch reads it (its error says so too).
        (
            '{"cpus_per_gpu": 0, "memory_mb_per_gpu": null}',
            {"cpus_per_gpu": 0, "memory_mb_per_gpu": None},
        ),
        ('{"memory_mb_per_gpu": 8000.0}', {"memory_mb_per_gpu": 8000.0}),
        ("", {}),
    ],
)
def test_good_labels_are_saved(admin_client, labels: str, stored: dict[str, Any]) -> None:
    response = admin_client.post(ADD, _form(labels=labels))

    assert response.status_code == 302
    assert Node.objects.get(name="gpu9").labels == stored
