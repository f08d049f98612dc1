"""Drains, undrains and GPU retirements are in the audit log: one row each, with who and why."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import AuditEntry, User
from cluster.choices import NodeState
from cluster.models import Device, Node
from cluster.services import node_drain, node_undrain
from jobs.services import job_mark_running
from tests.agents.conftest import started_job
from tests.factories import DeviceFactory, NodeFactory

pytestmark = pytest.mark.django_db
NODE = AuditEntry.TargetKind.NODE


def _rows() -> list[tuple[str, str, str, str, str, str, str]]:
    return list(
        AuditEntry.objects.order_by("id").values_list(
            "actor_username", "target_kind", "target_name", "field", "old_value", "new_value"
        )
    )


def _node(name: str, **fields: object) -> Node:
    node = NodeFactory(name=name, **fields)
    DeviceFactory(node=node, index=0, uuid=f"GPU-{name}-0")
    return node


def test_a_drain_from_the_cluster_page_writes_one_row_with_the_actor_and_reason(
    client, lab_admin: User
) -> None:
    node = _node("gpu1")
    client.force_login(lab_admin)

    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "driver update"})

    assert _rows() == [("root", NODE, "gpu1", "state", "up", "drained: driver update")]
    assert AuditEntry.objects.get().actor == lab_admin


def test_an_undrain_from_the_cluster_page_writes_one_row(client, lab_admin: User) -> None:
    node = _node("gpu1", state=NodeState.DRAINED, state_reason="Drained: x")
    client.force_login(lab_admin)

    client.post(reverse("dashboard:node-undrain", args=[node.pk]))

    assert _rows() == [("root", NODE, "gpu1", "state", "drained", "up")]


def test_admin_actions_write_one_row_per_node_changed_and_none_for_the_rest(
    client, lab_admin: User
) -> None:
    up, drained = _node("gpu1"), _node("gpu2", state=NodeState.DRAINED)
    down = _node("gpu3", state=NodeState.DOWN, return_state=NodeState.UP)
    client.force_login(lab_admin)
    url = reverse("admin:cluster_node_changelist")

    client.post(url, {"action": "drain", "_selected_action": [up.pk, drained.pk, down.pk]})

    assert sorted(_rows()) == [
        ("root", NODE, "gpu1", "state", "up", "drained: from the admin"),
        ("root", NODE, "gpu3", "return_state", "up", "drained: from the admin"),
    ]
    AuditEntry.objects.all().delete()

    client.post(url, {"action": "undrain", "_selected_action": [up.pk, down.pk]})

    assert sorted(_rows()) == [
        ("root", NODE, "gpu1", "state", "drained", "up"),
        ("root", NODE, "gpu3", "return_state", "drained", "up"),
    ]


def test_a_busy_node_is_logged_as_draining() -> None:
    node = _node("gpu1")
    job_mark_running(job_id=started_job(node, command=["sleep", "9"]).pk)

    node_drain(node_id=node.pk, reason="fan", by_username="ops")

    assert _rows() == [("ops", NODE, "gpu1", "state", "up", "draining: fan")]


def test_a_fault_drain_has_no_actor_and_a_refused_drain_or_undrain_writes_nothing() -> None:
    node = _node("gpu1")
    node_drain(node_id=node.pk, reason="Xid 79 on GPU 0")
    node_drain(node_id=node.pk, reason="again")  # already drained
    node_undrain(node_id=_node("gpu2").pk)  # up: nothing to undrain

    assert _rows() == [("", NODE, "gpu1", "state", "up", "drained: Xid 79 on GPU 0")]
    assert AuditEntry.objects.get().actor is None


def test_retiring_a_gpu_from_the_devices_admin_writes_one_row(client, lab_admin: User) -> None:
    node = _node("gpu1")
    device = node.devices.get()
    client.force_login(lab_admin)
    url = reverse("admin:cluster_device_changelist")

    client.post(url, {"action": "retire", "_selected_action": [device.pk]})
    client.post(url, {"action": "retire", "_selected_action": [device.pk]})  # retired already

    retired_at = Device.all_objects.get(pk=device.pk).retired_at
    assert retired_at is not None
    assert _rows() == [
        (
            "root",
            AuditEntry.TargetKind.DEVICE,
            "gpu1/0 GPU-gpu1-0",
            "retired_at",
            "",
            retired_at.isoformat(),
        )
    ]


def test_the_audit_log_page_lists_and_filters_node_rows(client, lab_admin: User) -> None:
    node_drain(node_id=_node("gpu1").pk, reason="driver update", by=lab_admin)
    client.force_login(lab_admin)

    page = client.get(reverse("dashboard:audit"), {"kind": "node"}).content.decode()

    assert "Node gpu1" in page
    assert "drained: driver update" in page
