"""What a node agent does when its GPUs or the control plane misbehave, and what the
control plane makes of it: a lost or missing GPU drains the node, an application Xid
does not, Xid codes survive an undelivered heartbeat, a refused heartbeat still keeps the
node alive, and the agent never follows a redirect with its token."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.heartbeats import node_agent_token_create
from agents.models import GpuSample
from agents.node_agent.__main__ import UrllibSession, heartbeat_send, run
from agents.node_agent.collector import NvmlCollector
from agents.node_agent.simnvml import SimGpu, SimulatedNvml
from cluster.choices import NodeState
from cluster.models import Device, Node
from cluster.services import device_retire
from config.errors import Conflict
from tests.agents.conftest import started_job
from tests.agents.test_heartbeat_api import ClientSession

URL = "/api/v1/agents/heartbeat/"
pytestmark = pytest.mark.usefixtures("fresh_rate_limits")


class Agent:
    """The real agent loop over a simulated NVML, posting through Django's test client."""

    def __init__(self, node: Node, gpus: list[SimGpu]) -> None:
        _, self.key = node_agent_token_create(node_id=node.pk)
        self.nvml = SimulatedNvml(gpus)
        self.collector = NvmlCollector(self.nvml, job_of=lambda pid: None)
        self.session: Any = ClientSession()

    def beat(self) -> int:
        return run(
            self.collector, self.session, url="http://cp", token=self.key, interval=0, beats=1
        )


def test_a_gpu_nvml_loses_drains_the_node_with_its_xid_and_the_agent_keeps_beating(
    node: Node,
) -> None:
    agent = Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")])
    assert agent.beat() == 1
    agent.nvml.raise_xid("GPU-bb", 79)
    agent.nvml.lose("GPU-bb")

    assert agent.beat() == 1
    assert agent.beat() == 1  # no crash: it goes on reporting the healthy GPU

    node.refresh_from_db()
    assert node.state == NodeState.DRAINED
    assert "GPU 1 (GPU-bb) is lost: NVML cannot reach it (Xid 79)" in node.state_reason
    lost = Device.objects.get(uuid="GPU-bb")
    assert lost.memory_mb == 81920  # what it had: a lost GPU's empty readings change nothing
    assert GpuSample.objects.filter(device=lost).count() == 1  # only its healthy beat


def test_a_gpu_the_agent_no_longer_reports_drains_the_node(node: Node) -> None:
    Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")]).beat()

    Agent(node, [SimGpu(uuid="GPU-aa")]).beat()  # a restarted agent sees one GPU only

    node.refresh_from_db()
    assert node.state == NodeState.DRAINED
    assert node.state_reason.endswith("GPU 1 (GPU-bb) is missing from the agent's report")
    assert Device.objects.filter(node=node).count() == 2  # kept for an admin to retire


def test_a_gone_gpu_is_missing_not_replaced_when_nvml_renumbers_the_others(node: Node) -> None:
    Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")]).beat()

    Agent(node, [SimGpu(uuid="GPU-bb")]).beat()  # NVML now calls GPU-bb "GPU 0"

    node.refresh_from_db()
    assert node.state == NodeState.DRAINED
    assert node.state_reason.endswith("GPU 0 (GPU-aa) is missing from the agent's report")
    assert list(Device.objects.filter(node=node).values_list("uuid", "index")) == [
        ("GPU-aa", 0),
        ("GPU-bb", 1),
    ]


def test_a_fault_reported_by_a_node_back_from_an_outage_drains_it_on_its_return(
    node: Node,
) -> None:
    agent = Agent(node, [SimGpu(uuid="GPU-aa")])
    agent.beat()
    # The liveness sweep took it down; it will return (reconcile) to the state it had.
    Node.objects.filter(pk=node.pk).update(
        state=NodeState.DOWN, return_state=NodeState.UP, state_reason="silent"
    )
    agent.nvml.raise_xid("GPU-aa", 48)

    assert agent.beat() == 1  # delivered: the agent forgets the Xid

    node.refresh_from_db()
    assert (node.state, node.return_state) == (NodeState.DOWN, NodeState.DRAINED)
    assert node.state_reason == "Drained: Xid 48 on GPU 0 (GPU-aa)"


def test_an_admin_retires_a_removed_gpu_and_the_node_is_whole_again(node: Node) -> None:
    Agent(node, [SimGpu(uuid="GPU-aa"), SimGpu(uuid="GPU-bb")]).beat()
    busy = started_job(node, command=["python", "train.py"])  # holds GPU 0
    with pytest.raises(Conflict):
        device_retire(device_id=busy.allocations.get().device_id)
    removed = Device.objects.get(uuid="GPU-bb")

    device_retire(device_id=removed.pk)
    Agent(node, [SimGpu(uuid="GPU-aa")]).beat()

    node.refresh_from_db()
    assert node.state == NodeState.UP
    assert list(Device.objects.filter(node=node).values_list("uuid", flat=True)) == ["GPU-aa"]


@pytest.mark.parametrize(("xid", "drains"), [(13, False), (31, False), (43, False), (48, True)])
def test_only_hardware_xids_drain_the_node(node: Node, xid: int, drains: bool) -> None:
    agent = Agent(node, [SimGpu(uuid="GPU-aa")])
    agent.beat()
    agent.nvml.raise_xid("GPU-aa", xid)  # 13, 31, 43: a user's own kernel can cause them

    agent.beat()

    node.refresh_from_db()
    assert (node.state == NodeState.DRAINED) is drains
    assert GpuSample.objects.order_by("at", "id").last().xid_errors == [xid]  # still shown


class Unreachable:
    def post(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionRefusedError("control plane down")


def test_an_xid_raised_while_the_control_plane_is_away_is_reported_when_it_is_back(
    node: Node,
) -> None:
    agent = Agent(node, [SimGpu(uuid="GPU-aa")])
    agent.beat()
    agent.nvml.raise_xid("GPU-aa", 48)
    reachable, agent.session = agent.session, Unreachable()
    assert agent.beat() == 0

    agent.session = reachable
    assert agent.beat() == 1

    node.refresh_from_db()
    assert node.state == NodeState.DRAINED
    assert "Xid 48 on GPU 0 (GPU-aa)" in node.state_reason


def test_a_failing_reading_does_not_stop_the_agent(node: Node) -> None:
    agent = Agent(node, [SimGpu(uuid="GPU-aa")])
    calls = {"n": 0}
    collect = agent.collector.collect

    def flaky() -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("/proc went away")
        return collect()

    agent.collector.collect = flaky  # type: ignore[method-assign]

    delivered = run(
        agent.collector, agent.session, url="http://cp", token=agent.key, interval=0, beats=2
    )

    assert delivered == 1


def test_a_refused_heartbeat_still_keeps_the_node_alive(node: Node) -> None:
    from django.utils import timezone

    Node.objects.filter(pk=node.pk).update(state=NodeState.SUSPECT, last_heartbeat_at=None)
    _, key = node_agent_token_create(node_id=node.pk)
    payload = NvmlCollector(SimulatedNvml([SimGpu(uuid="GPU-aa")]), job_of=lambda p: None).collect()
    payload["gpus"][0]["utilization_pct"] = 180  # e.g. a newer agent reporting differently
    before = timezone.now()

    response = APIClient().post(URL, payload, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code == 400 and "gpus" in response.json()
    node.refresh_from_db()
    assert node.state == NodeState.UP and node.last_heartbeat_at >= before
    assert not GpuSample.objects.exists() and not Device.objects.exists()  # readings refused


# --------------------------------------------------------------------------- redirects


class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str]] = []
    redirect_to = ""

    def _answer(self) -> None:
        type(self).requests.append((self.command, self.path, self.headers.get("Authorization", "")))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.redirect_to:
            self.send_response(301)
            self.send_header("Location", self.redirect_to + self.path)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[str, type[_Recorder], str, type[_Recorder]]]:
    """A front server that redirects everything to a second one."""
    other = type("Other", (_Recorder,), {"requests": [], "redirect_to": ""})
    back = http.server.ThreadingHTTPServer(("127.0.0.1", 0), other)
    other_url = f"http://127.0.0.1:{back.server_port}"
    front_handler = type("Front", (_Recorder,), {"requests": [], "redirect_to": other_url})
    front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), front_handler)
    for server in (front, back):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{front.server_port}", front_handler, other_url, other
    finally:
        for server in (front, back):
            server.shutdown()
            server.server_close()


def test_the_agent_does_not_follow_a_redirect_with_its_token(servers: Any, caplog: Any) -> None:
    front_url, front, other_url, other = servers

    sent = heartbeat_send(UrllibSession(), url=front_url, token="gpn_secret", payload={})

    assert sent is False
    assert [(method, auth) for method, _, auth in front.requests] == [("POST", "Bearer gpn_secret")]
    assert other.requests == []  # the token went nowhere else
    assert f"redirected to {other_url}{URL}: give the agent that URL" in caplog.text
