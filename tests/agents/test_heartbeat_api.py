"""The heartbeat endpoint: token auth, validation, rate limit, device registration,
metrics and per-job use, automatic drain on hardware faults. Driven by the real agent
code (`run`) over Django's test client instead of a network."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts.models import AuditEntry, User
from agents.heartbeats import node_agent_token_create
from agents.models import GpuSample, JobGpuSample, NodeAgentToken
from agents.node_agent.__main__ import run
from agents.node_agent.collector import NvmlCollector
from agents.node_agent.simnvml import SimGpu, SimProcess, SimulatedNvml
from cluster.choices import NodeState
from cluster.models import Device, Node
from jobs.services import job_mark_running
from tests.agents.conftest import started_job
from tests.factories import NodeFactory

URL = "/api/v1/agents/heartbeat/"
pytestmark = pytest.mark.usefixtures("fresh_rate_limits")
MIB = 1024 * 1024


class ClientSession:
    """What the agent needs of `requests.Session`, served by Django's test client."""

    def __init__(self) -> None:
        self.client = APIClient()

    def post(self, url: str, *, json: Any, headers: dict[str, str], timeout: float) -> Any:
        path = url.split("://", 1)[-1].split("/", 1)[-1]
        return self.client.post(
            "/" + path, json, format="json", HTTP_AUTHORIZATION=headers["Authorization"]
        )


def beat(node: Node, nvml: SimulatedNvml, job_of: Any = None) -> int:
    _, key = node_agent_token_create(node_id=node.pk)
    collector = NvmlCollector(nvml, job_of=job_of or (lambda pid: None))
    return run(collector, ClientSession(), url="http://cp", token=key, interval=0, beats=1)


def test_devices_register_themselves_and_samples_are_stored(node: Node) -> None:
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa", utilization_pct=55), SimGpu(uuid="GPU-bb")])

    assert beat(node, nvml) == 1

    devices = list(
        Device.objects.filter(node=node).values_list("index", "uuid", "device_type__name")
    )
    assert devices == [(0, "GPU-aa", "a100"), (1, "GPU-bb", "a100")]
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None
    assert node.labels["driver_version"] == "550.90.07"
    assert node.labels["cuda_version"] == "12.4"
    assert sorted(GpuSample.objects.values_list("device__uuid", "utilization_pct")) == [
        ("GPU-aa", 55), ("GPU-bb", 0),
    ]  # fmt: skip


def test_an_unknown_gpu_model_gets_a_new_device_type_for_the_admin_to_rate(node: Node) -> None:
    beat(node, SimulatedNvml([SimGpu(uuid="GPU-h1", name="NVIDIA H100 80GB HBM3")]))
    assert Device.objects.get(uuid="GPU-h1").device_type.name == "h100-80gb-hbm3"


def test_per_job_use_is_recorded_only_for_the_job_holding_the_gpu(node: Node) -> None:
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa", utilization_pct=90)])
    beat(node, nvml)
    job = started_job(node, command=["python", "train.py"])
    job_mark_running(job_id=job.pk)
    nvml.gpus[0].processes = [
        SimProcess(pid=1, usedGpuMemory=1000 * MIB),
        SimProcess(pid=2, usedGpuMemory=500 * MIB),
        SimProcess(pid=3, usedGpuMemory=700 * MIB),  # claims another job: not counted
    ]
    owners = {1: (job.pk, job.attempt), 2: (job.pk, job.attempt), 3: (999, 1)}

    beat(node, nvml, job_of=owners.get)

    assert list(
        JobGpuSample.objects.values_list("job_id", "utilization_pct", "memory_used_mb")
    ) == [(job.pk, 90, 1500)]


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("xid", "Xid 79 on GPU 0 (GPU-aa)"),
        ("ecc", "2 uncorrected ECC errors on GPU 0 (GPU-aa)"),
    ],
)
def test_hardware_faults_drain_the_node_with_the_reason(
    node: Node, fault: str, reason: str
) -> None:
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa")])
    _, key = node_agent_token_create(node_id=node.pk)
    collector = NvmlCollector(nvml, job_of=lambda pid: None)
    session = ClientSession()
    run(collector, session, url="http://cp", token=key, interval=0, beats=1)
    if fault == "xid":
        nvml.raise_xid("GPU-aa", 79)
    else:
        nvml.gpus[0].ecc_uncorrected = 2

    run(collector, session, url="http://cp", token=key, interval=0, beats=1)

    node.refresh_from_db()
    assert node.state == NodeState.DRAINED
    assert reason in node.state_reason


def _payload() -> dict[str, Any]:
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa")])
    return NvmlCollector(nvml, job_of=lambda pid: None).collect()


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer gpn_not-a-token", 401),
        ("Token gpn_not-a-token", 401),
    ],
)
def test_a_heartbeat_without_a_valid_node_token_is_refused(
    node: Node, authorization: str | None, status: int
) -> None:
    client = APIClient()
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    assert client.post(URL, _payload(), format="json", **headers).status_code == status
    assert not GpuSample.objects.exists()


def test_a_users_api_token_is_no_node_token(node: Node, owner: User) -> None:
    from accounts.services import api_token_create

    _, key = api_token_create(user=owner, name="mine")
    response = APIClient().post(URL, _payload(), format="json", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code in (401, 403)
    assert not GpuSample.objects.exists()
    assert Node.objects.get(pk=node.pk).last_heartbeat_at is None


def test_a_revoked_token_stops_working(node: Node) -> None:
    _, old = node_agent_token_create(node_id=node.pk)
    node_agent_token_create(node_id=node.pk)
    response = APIClient().post(URL, _payload(), format="json", HTTP_AUTHORIZATION=f"Bearer {old}")
    assert response.status_code == 401


def test_an_admin_revokes_a_token_in_the_admin_and_a_student_cannot(
    node: Node, lab_admin: User, owner: User
) -> None:
    _, key = node_agent_token_create(node_id=node.pk)
    token = NodeAgentToken.objects.get(node=node)
    url = reverse("admin:agents_nodeagenttoken_changelist")
    action = {"action": "revoke", "_selected_action": [token.pk]}

    student = Client()
    student.force_login(owner)
    student.post(url, action)
    token.refresh_from_db()
    assert token.revoked_at is None

    admin_client = Client()
    admin_client.force_login(lab_admin)
    assert admin_client.post(url, action).status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    response = APIClient().post(URL, _payload(), format="json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 401
    # Like a drain, the revocation is in the audit log, naming who and which node; the
    # student's refused attempt and a second revocation of the same token add nothing.
    admin_client.post(url, action)
    entries = list(AuditEntry.objects.filter(target_kind=AuditEntry.TargetKind.AGENT_TOKEN))
    assert [(e.actor, e.target_name, e.field) for e in entries] == [
        (lab_admin, node.name, "revoked_at")
    ]
    assert f"token {token.pk}" in entries[0].new_value


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p["gpus"][0].update(utilization_pct=180), "gpus"),
        (lambda p: p["gpus"][0].update(uuid="GPU-a; rm -rf /"), "gpus"),
        (lambda p: p["gpus"].append(dict(p["gpus"][0])), "gpus"),
        (lambda p: p.pop("driver_version"), "driver_version"),
        # Past PostgreSQL's integer: these were a 500 (DataError) before.
        (lambda p: p["gpus"][0].update(memory_total_mb=2**31), "gpus"),
        (lambda p: p["gpus"][0].update(ecc_uncorrected=10**30), "gpus"),
        (lambda p: p["jobs"].append({"job_id": 2**40, "attempt": 1, "progress": 1}), "jobs"),
    ],
)
def test_a_malformed_heartbeat_is_refused_naming_the_field(
    node: Node, change: Any, field: str
) -> None:
    _, key = node_agent_token_create(node_id=node.pk)
    payload = _payload()
    change(payload)
    response = APIClient().post(URL, payload, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 400
    assert field in response.json()
    assert not GpuSample.objects.exists()


def test_heartbeats_are_rate_limited_per_node(node: Node, settings: Any) -> None:
    settings.GPULAB_AGENT_HEARTBEAT_RATE = "2/min"
    _, key = node_agent_token_create(node_id=node.pk)
    client = APIClient()
    codes = [
        client.post(URL, _payload(), format="json", HTTP_AUTHORIZATION=f"Bearer {key}").status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]


def test_a_heartbeat_from_a_down_node_asks_for_a_reconcile_and_keeps_it_down(node: Node) -> None:
    from django.utils import timezone

    # Taken DOWN by the liveness sweep (it remembers where to return), not by an admin.
    Node.objects.filter(pk=node.pk).update(
        state=NodeState.DOWN, return_state=NodeState.UP, last_heartbeat_at=timezone.now()
    )
    _, key = node_agent_token_create(node_id=node.pk)

    response = APIClient().post(URL, _payload(), format="json", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code == 200
    assert response.json()["reconcile"] is True
    assert Node.objects.get(pk=node.pk).state == NodeState.DOWN


def post_gpus(node: Node, gpus: list[SimGpu]) -> Any:
    """One heartbeat from `node`'s agent reporting exactly `gpus`."""
    _, key = node_agent_token_create(node_id=node.pk)
    payload = NvmlCollector(SimulatedNvml(gpus), job_of=lambda pid: None).collect()
    return APIClient().post(URL, payload, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")


def in_service(node: Node) -> list[tuple[int, str]]:
    return list(node.devices.order_by("index").values_list("index", "uuid"))


def test_a_node_cannot_take_over_a_gpu_another_node_is_using(node: Node) -> None:
    other = NodeFactory(name="gpu-8")
    assert post_gpus(other, [SimGpu(uuid="GPU-bb")]).status_code == 200
    job = started_job(other, command=["python", "train.py"])

    response = post_gpus(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")])

    assert response.status_code == 409
    assert "GPU GPU-bb is registered on node gpu-8 (up, allocated to a job)" in str(response.json())
    assert in_service(other) == [(0, "GPU-bb")]
    assert in_service(node) == []  # the whole heartbeat was refused: nothing half-written
    assert job.allocations.get().device.node == other
    assert GpuSample.objects.count() == 1  # only gpu-8's own earlier heartbeat


def test_a_gpu_moves_from_a_drained_idle_node_into_its_new_slot(node: Node) -> None:
    other = NodeFactory(name="gpu-8")
    post_gpus(other, [SimGpu(uuid="GPU-bb")])
    post_gpus(node, [SimGpu(uuid="GPU-aa")])
    Node.objects.filter(pk=other.pk).update(state=NodeState.DRAINED)

    # The card now sits in gpu-7's first slot, where GPU-aa was: that one retires.
    assert post_gpus(node, [SimGpu(uuid="GPU-bb")]).status_code == 200

    assert in_service(node) == [(0, "GPU-bb")]
    assert in_service(other) == []
    retired = Device.all_objects.get(uuid="GPU-aa")
    assert retired.retired_at is not None and not Device.objects.filter(uuid="GPU-aa").exists()


def test_replacing_the_gpu_in_a_slot_again_and_again_keeps_working(node: Node) -> None:
    # Retired GPUs used to park at index 10_000 + i, so a third card in one slot collided.
    for uuid in ("GPU-x1", "GPU-x2", "GPU-x3", "GPU-x1"):
        assert post_gpus(node, [SimGpu(uuid=uuid)]).status_code == 200
        assert in_service(node) == [(0, uuid)]
    assert Device.all_objects.filter(node=node, retired_at__isnull=False).count() == 2


def test_a_gpu_still_allocated_to_a_job_is_not_replaced(node: Node) -> None:
    post_gpus(node, [SimGpu(uuid="GPU-aa")])
    started_job(node, command=["python", "train.py"])

    response = post_gpus(node, [SimGpu(uuid="GPU-zz")])

    assert response.status_code == 409
    assert "GPU-aa in that slot is still allocated to a job" in str(response.json())
    assert in_service(node) == [(0, "GPU-aa")]


def test_the_memory_of_many_processes_of_one_job_is_capped_not_a_500(node: Node) -> None:
    nvml = SimulatedNvml([SimGpu(uuid="GPU-aa", utilization_pct=90)])
    beat(node, nvml)
    job = started_job(node, command=["python", "train.py"])
    job_mark_running(job_id=job.pk)
    big = (2**31 - 1) * MIB
    nvml.gpus[0].processes = [
        SimProcess(pid=1, usedGpuMemory=big),
        SimProcess(pid=2, usedGpuMemory=big),
    ]
    owners = {1: (job.pk, job.attempt), 2: (job.pk, job.attempt)}

    assert beat(node, nvml, job_of=owners.get) == 1

    assert JobGpuSample.objects.get().memory_used_mb == 2**31 - 1
