"""`node_bootstrap`: the control plane installs and starts the agent over SSH, and the
agent's heartbeats reach the endpoint over real HTTP (a live server)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.heartbeats import node_agent_token_check, node_agent_token_create
from agents.models import NodeAgentToken
from agents.services import node_agent_bootstrap
from cluster.models import Device, Node
from config.errors import ApplicationError
from tests.agents.conftest import wait_for


def test_a_bootstrapped_agent_reports_and_its_gpus_register_themselves(
    transactional_db: None, ssh_node: Node, live_server: Any, settings: Any, tmp_path: Path
) -> None:
    settings.GPULAB_NODE_AGENT_DIR = str(tmp_path / "agent")
    _, old_key = node_agent_token_create(node_id=ssh_node.pk)
    pid = node_agent_bootstrap(
        node_id=ssh_node.pk,
        control_plane_url=live_server.url,
        python=sys.executable,  # stands in for the node's python3; the agent needs no venv
        extra_args=("--simulated-gpus", "2", "--interval", "0.5"),
    )
    try:
        wait_for(
            lambda: Device.objects.filter(node=ssh_node, uuid__startswith="GPU-sim-").count() == 2,
            timeout=15,
        )
        assert Node.objects.get(pk=ssh_node.pk).last_heartbeat_at is not None
        token_file = tmp_path / "agent" / "token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert NodeAgentToken.objects.filter(node=ssh_node, revoked_at__isnull=True).count() == 1
        assert node_agent_token_check(key=old_key) is None  # the replaced agent stops counting
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGTERM)


def test_a_failed_bootstrap_leaves_the_running_agents_token_working(
    transactional_db: None, ssh_node: Node, settings: Any, tmp_path: Path
) -> None:
    agent_dir = tmp_path / "agent"
    settings.GPULAB_NODE_AGENT_DIR = str(agent_dir)
    _, running_key = node_agent_token_create(node_id=ssh_node.pk)
    # The agent already running there: its pid file and its token file.
    agent_dir.mkdir()
    running = subprocess.Popen(["sleep", "300"])
    (agent_dir / "agent.pid").write_text(f"{running.pid}\n")
    (agent_dir / "token").write_text(running_key)
    try:
        with pytest.raises(ApplicationError, match="did not start"):
            node_agent_bootstrap(
                node_id=ssh_node.pk,
                control_plane_url="http://127.0.0.1:9",
                python="/nonexistent/py",
            )

        assert running.poll() is None  # left running
        assert (agent_dir / "token").read_text() == running_key
        assert node_agent_token_check(key=running_key) == ssh_node
        assert NodeAgentToken.objects.filter(node=ssh_node, revoked_at__isnull=True).count() == 1
    finally:
        running.kill()
        running.wait()
