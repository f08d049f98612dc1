"""A real OpenSSH server on 127.0.0.1 for the agent tests, and a node that points at it.

The server runs as the current user with a generated host key and a generated client key,
a generated config and `-D -e` (foreground, logs to stderr). Without /usr/sbin/sshd the
SSH tests are skipped with the reason, except with CI=true, where that is a failure
(`make test` installs openssh-server when it is missing).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from agents.models import NodeHostKey
from cluster.choices import Runtime
from cluster.models import Node
from jobs.models import Job
from jobs.services import job_start
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshServer:
    port: int
    host_key_type: str
    host_key_base64: str
    client_key: Path
    workdir: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path) -> tuple[str, str]:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpulab-test", "-f", str(path)],
        check=True,
    )
    key_type, key_base64, *_ = Path(f"{path}.pub").read_text().split()
    return key_type, key_base64


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    if not os.path.exists(SSHD):
        message = f"{SSHD} is missing: install openssh-server (make test does)."
        if settings.STRICT_SERVICES:
            pytest.fail(message)
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp("sshd")
    host_type, host_base64 = _keygen(workdir / "host_ed25519.key")
    _keygen(workdir / "client_ed25519.key")
    (workdir / "authorized_keys").write_text(
        Path(f"{workdir / 'client_ed25519.key'}.pub").read_text()
    )
    port = _free_port()
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {workdir / 'host_ed25519.key'}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                f"PidFile {workdir / 'sshd.pid'}",
                # Tests run as root in the lab's containers; only this throwaway server
                # allows a root login, with a key and nothing else.
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "StrictModes no",
                "UsePAM no",
                "Subsystem sftp internal-sftp",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    log = (workdir / "sshd.log").open("w")
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log, stdout=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    else:
        process.kill()
    if process.poll() is not None:
        pytest.fail(f"sshd did not start: {(workdir / 'sshd.log').read_text()}")
    yield SshServer(
        port=port,
        host_key_type=host_type,
        host_key_base64=host_base64,
        client_key=workdir / "client_ed25519.key",
        workdir=workdir,
    )
    process.terminate()
    process.wait(timeout=10)
    log.close()


@pytest.fixture
def ssh_settings(settings, ssh_server: SshServer, tmp_path: Path) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """Point the control plane at the test server's client key and a fresh run root."""
    settings.GPULAB_SSH_KEY_FILE = str(ssh_server.client_key)
    settings.GPULAB_SSH_CONNECT_ATTEMPTS = 1
    settings.GPULAB_SSH_TIMEOUT_SECONDS = 10
    run_root = tmp_path / "runs"
    settings.GPULAB_NODE_RUN_ROOT = str(run_root)
    yield run_root
    # Leave no test job running behind: kill every attempt's process group.
    for pid_file in run_root.glob("*/pid"):
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


@pytest.fixture
def ssh_node(db: None, ssh_server: SshServer, ssh_settings: Path) -> Node:
    """A `process`-runtime node with two GPUs at the test server, its host key approved."""
    node = NodeFactory(
        name="sshnode",
        address="127.0.0.1",
        ssh_port=ssh_server.port,
        ssh_user=getpass.getuser(),
        runtime=Runtime.PROCESS,
    )
    a100 = DeviceTypeFactory(name="a100", speed=2.0)
    for index in range(2):
        DeviceFactory(node=node, index=index, device_type=a100, uuid=f"GPU-sshnode-{index}")
    NodeHostKey.objects.create(
        node=node,
        key_type=ssh_server.host_key_type,
        key_base64=ssh_server.host_key_base64,
        fingerprint="(test)",
        approved_at=timezone.now(),
    )
    return node


def started_job(
    node: Node, *, command: list[str], env: dict[str, str] | None = None, **fields
) -> Job:  # type: ignore[no-untyped-def]
    """A job PENDING → STARTING on the node's first GPU, as a scheduling round leaves it."""
    job = JobFactory(command=command, env=env or {}, **fields)
    device = node.devices.order_by("index").first()
    return job_start(job_id=job.pk, device_ids=[device.pk])


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(predicate, *, timeout: float = 10.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@pytest.fixture(autouse=True)
def _no_agent_guards() -> Iterator[None]:
    """The agents' Redis guards (one poll per node, re-sends at most once per interval)
    start empty: their keys name job and node ids, which a later run with the same run id
    reuses in its fresh database."""
    run_cache_clear("agents")
    yield
    run_cache_clear("agents")


def run_cache_clear(namespace: str = "") -> None:
    """Delete this test run's cache keys (under `namespace`, or all of them).

    Never `cache.clear()`: that is a FLUSHDB of the Redis every concurrent run shares, and
    wipes another run's login lockouts and rate limits in the middle of its tests.
    """
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    prefix = settings.CACHES["default"]["KEY_PREFIX"]
    pattern = f"{prefix}:*:{namespace}:*" if namespace else f"{prefix}:*"
    keys = list(client.scan_iter(match=pattern))
    if keys:
        client.delete(*keys)


@pytest.fixture
def fresh_rate_limits() -> None:
    """Heartbeat rate limits start from zero (they live in the cache)."""
    run_cache_clear()


@pytest.fixture
def node(db: None) -> Node:
    """A node whose agent reports a100 GPUs (registered by its heartbeats)."""
    DeviceTypeFactory(name="a100", speed=2.0)
    return NodeFactory(name="gpu-7")


def reported_gpus(node: Node, *, xid_errors: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Every GPU of `node` as its agent reports it when idle (a validated heartbeat's
    `gpus`), with `xid_errors` on each."""
    return [
        {
            "index": device.index,
            "uuid": device.uuid,
            "name": device.model_name or "NVIDIA GPU",
            "lost": False,
            "memory_total_mb": device.memory_mb or 0,
            "memory_used_mb": 0,
            "utilization_pct": 0,
            "temperature_c": 40,
            "power_w": 60.0,
            "ecc_uncorrected": 0,
            "xid_errors": list(xid_errors),
            "processes": [],
        }
        for device in node.devices.order_by("index")
    ]
