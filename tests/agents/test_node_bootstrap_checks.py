"""`node_bootstrap` touches a working agent only once its replacement has got a heartbeat
through: a wrong URL, or an agent directory that cannot be made, fails readably, with the
new token revoked and the running agent left alone with its own."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.heartbeats import node_agent_token_check, node_agent_token_create
from agents.models import NodeAgentToken
from agents.services import AgentDidNotStart, node_agent_bootstrap
from cluster.models import Node

pytestmark = pytest.mark.usefixtures("fresh_rate_limits")


@pytest.mark.parametrize(
    "url",
    [
        "gpulab.example.edu",  # no scheme: the agent would post to a relative path
        "ftp://gpulab.example.edu",
        "http://",
        "http://gpulab.example.edu:99999",
        "https://gpulab.example.edu/?next=1",
        "https://admin:secret@gpulab.example.edu",
        "https://gpulab.example.edu /x",
    ],
)
def test_a_url_that_is_not_http_to_a_host_is_refused_naming_url(node: Node, url: str) -> None:
    with pytest.raises(CommandError, match="--url"):
        call_command("node_bootstrap", node.name, "--url", url)
    assert not NodeAgentToken.objects.filter(node=node).exists()


def test_an_agent_whose_heartbeat_does_not_get_through_leaves_the_running_one_alone(
    transactional_db: None, ssh_node: Node, settings: Any, tmp_path: Path
) -> None:
    agent_dir = tmp_path / "agent"
    settings.GPULAB_NODE_AGENT_DIR = str(agent_dir)
    _, running_key = node_agent_token_create(node_id=ssh_node.pk)
    agent_dir.mkdir()
    running = subprocess.Popen(["sleep", "300"])  # the agent already running there
    (agent_dir / "agent.pid").write_text(f"{running.pid}\n")
    (agent_dir / "token").write_text(running_key)
    said: list[str] = []
    try:
        # A well-formed URL nothing answers at: an agent started with it would stay alive,
        # retrying, while its node went DOWN for silence.
        with pytest.raises(AgentDidNotStart, match="did not start: its heartbeat did not get"):
            node_agent_bootstrap(
                node_id=ssh_node.pk,
                control_plane_url="http://127.0.0.1:9",
                python=sys.executable,
                extra_args=("--simulated-gpus", "1", "--interval", "0.5"),
                progress=said.append,
            )

        assert running.poll() is None  # left running
        assert (agent_dir / "agent.pid").read_text() == f"{running.pid}\n"
        assert (agent_dir / "token").read_text() == running_key
        assert not (agent_dir / "token.new").exists()
        assert node_agent_token_check(key=running_key) == ssh_node
        assert NodeAgentToken.objects.filter(node=ssh_node).count() == 2
        assert NodeAgentToken.objects.filter(node=ssh_node, revoked_at__isnull=True).count() == 1
        assert len(said) == 1 and "http://127.0.0.1:9" in said[0]
    finally:
        running.kill()
        running.wait()


def test_an_agent_directory_that_cannot_be_made_fails_readably_and_revokes_the_new_token(
    transactional_db: None, ssh_node: Node, settings: Any
) -> None:
    settings.GPULAB_NODE_AGENT_DIR = "/proc/gpulab-agent"  # not even root can mkdir there

    with pytest.raises(CommandError, match=r"/proc/gpulab-agent \(GPULAB_NODE_AGENT_DIR\) could"):
        call_command(
            "node_bootstrap",
            ssh_node.name,
            "--url",
            "http://127.0.0.1:9",
            "--python",
            sys.executable,
            stdout=io.StringIO(),
        )
    assert NodeAgentToken.objects.filter(node=ssh_node).count() == 1
    assert not NodeAgentToken.objects.filter(node=ssh_node, revoked_at__isnull=True).exists()
