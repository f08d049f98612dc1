"""Host keys: only an admin-approved key is trusted; unknown and changed keys are refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from accounts.models import User
from agents.models import NodeHostKey
from agents.services import agent_launch, node_host_key_approve
from agents.ssh import HostKeyRefused, node_ssh
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Job
from tests.agents.conftest import SshServer, started_job


def _fingerprint_of(public_key: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return out.split()[1]


def test_a_new_nodes_key_is_recorded_as_pending_and_refused(
    ssh_node: Node, ssh_server: SshServer
) -> None:
    NodeHostKey.objects.filter(node=ssh_node).delete()

    with pytest.raises(HostKeyRefused, match="no admin has approved"), node_ssh(ssh_node):
        pass

    pending = NodeHostKey.objects.get(node=ssh_node)
    assert pending.approved_at is None
    assert pending.key_base64 == ssh_server.host_key_base64
    # The fingerprint an admin compares with `ssh-keygen -lf` on the node itself.
    host_public = Path(f"{ssh_server.workdir / 'host_ed25519.key'}.pub")
    assert pending.fingerprint == _fingerprint_of(host_public)


def test_an_approved_pending_key_lets_the_control_plane_in(ssh_node: Node, lab_admin: User) -> None:
    NodeHostKey.objects.filter(node=ssh_node).delete()
    with pytest.raises(HostKeyRefused), node_ssh(ssh_node):
        pass

    node_host_key_approve(key_id=NodeHostKey.objects.get(node=ssh_node).pk, by=lab_admin)

    with node_ssh(ssh_node) as session:
        assert session.run("echo ok").stdout == "ok\n"


def test_a_node_whose_host_key_changed_is_refused(ssh_node: Node, tmp_path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    key_type, key_base64 = (tmp_path / "other.pub").read_text().split()[:2]
    NodeHostKey.objects.filter(node=ssh_node).update(key_type=key_type, key_base64=key_base64)

    with pytest.raises(HostKeyRefused, match="host key changed"), node_ssh(ssh_node):
        pass

    # The key it presents now waits for an admin; the old approval stands until then.
    assert NodeHostKey.objects.filter(node=ssh_node, approved_at__isnull=True).count() == 1
    assert NodeHostKey.objects.filter(node=ssh_node, approved_at__isnull=False).count() == 1


def test_a_launch_on_a_node_with_a_changed_key_never_runs_the_job(
    ssh_node: Node, tmp_path: Path, ssh_settings: Path
) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    key_type, key_base64 = (tmp_path / "other.pub").read_text().split()[:2]
    NodeHostKey.objects.filter(node=ssh_node).update(key_type=key_type, key_base64=key_base64)
    job = started_job(ssh_node, command=["true"])

    with pytest.raises(HostKeyRefused):
        agent_launch(job_id=job.pk, attempt=job.attempt)

    assert Job.objects.get(pk=job.pk).state == JobState.STARTING
    assert not ssh_settings.exists(), "nothing may run on a node that is not trusted"
