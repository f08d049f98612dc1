"""SSH to nodes (paramiko), with host keys checked against the approved-keys store.

The only module that opens SSH connections. Trust comes from `NodeHostKey` rows alone —
never from `~/.ssh/known_hosts` of whoever runs the worker — and an unknown or changed
key is refused (`RejectPolicy`) after being recorded for an admin to review.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import select
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import paramiko
from django.conf import settings
from django.db import IntegrityError

from cluster.models import Node
from config.errors import ApplicationError

from .models import NodeHostKey

logger = logging.getLogger(__name__)


class NodeUnreachable(ApplicationError):
    """Network trouble or a timeout: worth retrying later."""

    status_code = 503
    default_code = "node_unreachable"


class CommandTimedOut(NodeUnreachable):
    """A command ran past its deadline after its channel had opened.

    The node answered and took the command; the command itself did not end in time (a
    `docker run` still pulling a large image, a process stuck on a dead disk). A
    NodeUnreachable for every caller that only retries or reports one (poll, stop, logs,
    bootstrap, clean-up); the launch tells it apart, since a slow launch is that job's
    failure and no reason to take the node and every job on it down.
    """

    default_code = "command_timed_out"


class HostKeyRefused(ApplicationError):
    """The node's host key is not (or no longer) approved: never retried automatically."""

    status_code = 409
    default_code = "host_key_refused"


class SshMisconfigured(ApplicationError):
    """gpulab's own SSH setup is broken (no key, or one it cannot read): no node's fault.

    Raised before any connection is tried, so callers never take a node down or requeue
    its jobs for it; an admin must fix the worker's configuration.
    """

    status_code = 503
    default_code = "ssh_misconfigured"


# Each stream of a command's output is kept up to this many bytes (its end, where the
# last line a launch prints and the newest log lines are): a chatty command cannot fill
# the worker's memory.
MAX_OUTPUT_BYTES = 1024 * 1024
_READ_CHUNK = 32 * 1024


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str


def host_key_fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64>` without padding, as `ssh-keygen -l` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _known_name(node: Node) -> str:
    # paramiko looks host keys up by this name (the known_hosts convention for ports ≠ 22).
    return node.address if node.ssh_port == 22 else f"[{node.address}]:{node.ssh_port}"


def _record_seen_key(node: Node, key: paramiko.PKey) -> NodeHostKey:
    try:
        seen, _ = NodeHostKey.objects.get_or_create(
            node=node,
            key_type=key.get_name(),
            key_base64=key.get_base64(),
            defaults={"fingerprint": host_key_fingerprint(key)},
        )
    except IntegrityError:  # two workers saw it at once
        seen = NodeHostKey.objects.get(
            node=node, key_type=key.get_name(), key_base64=key.get_base64()
        )
    return seen


class _RecordAndReject(paramiko.RejectPolicy):
    """Refuse an unknown key, but first record it as pending so an admin can approve it."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey):  # type: ignore[no-untyped-def]
        seen = _record_seen_key(self.node, key)
        raise HostKeyRefused(
            f"Node {self.node.name} presented host key {seen.fingerprint} ({seen.key_type}), "
            "which no admin has approved; approve it under Node host keys."
        )


def _client_key() -> paramiko.PKey:
    """gpulab's private key, or SshMisconfigured: a local problem, never the node's."""
    path = settings.GPULAB_SSH_KEY_FILE
    if not path:
        raise SshMisconfigured("GPULAB_SSH_KEY_FILE is not set: no key to log in to nodes with.")
    for key_class in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return key_class.from_private_key_file(path)
        except paramiko.SSHException:
            continue  # not this key type (or a passphrase): try the next
        except OSError as exc:  # missing file, no permission
            raise SshMisconfigured(
                f"GPULAB_SSH_KEY_FILE={path!r} cannot be read: {exc.strerror or exc}."
            ) from exc
    raise SshMisconfigured(f"GPULAB_SSH_KEY_FILE={path!r} is not a readable private key.")


@dataclass(frozen=True)
class SshBudget:
    """How long one `node_ssh` may take against a node that does not answer.

    `timeout` bounds each step on its own (TCP connect, key exchange, login, opening a
    channel, and each command that gives no timeout of its own), and a failed connect is
    tried `connect_attempts` times, with a pause of 1, 2, … 5 s between tries.
    """

    connect_attempts: int
    timeout: float


@contextmanager
def node_ssh(node: Node, *, budget: SshBudget | None = None) -> Iterator[NodeSession]:
    """An authenticated SSH session to `node`, retried a few times on network errors.

    `budget`: connect attempts and step timeout; by default the settings'
    (GPULAB_SSH_CONNECT_ATTEMPTS, GPULAB_SSH_TIMEOUT_SECONDS).
    Raises HostKeyRefused (unknown or changed host key: not retried), NodeUnreachable,
    or SshMisconfigured (gpulab's own key is missing or unreadable: not the node's fault).
    """
    # Loaded before the retry loop: the key is a local file, so an OSError reading it
    # must not pass for the network error the loop retries and blames on the node.
    pkey = _client_key()
    approved = list(NodeHostKey.objects.filter(node=node, approved_at__isnull=False))
    # Tasks (launch, stop, poll) pass none: they can afford the settings' retries.
    budget = budget or SshBudget(
        connect_attempts=settings.GPULAB_SSH_CONNECT_ATTEMPTS,
        timeout=settings.GPULAB_SSH_TIMEOUT_SECONDS,
    )
    attempts = budget.connect_attempts
    timeout = budget.timeout
    last_error: Exception | None = None
    for attempt in range(1, attempts + 1):
        client = paramiko.SSHClient()
        host_keys = client.get_host_keys()
        for row in approved:
            host_keys.add(
                _known_name(node), row.key_type, paramiko.PKey.from_type_string(
                    row.key_type, base64.b64decode(row.key_base64)
                ),
            )  # fmt: skip
        client.set_missing_host_key_policy(_RecordAndReject(node))
        try:
            client.connect(
                node.address,
                port=node.ssh_port,
                username=node.ssh_user,
                pkey=pkey,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            seen = _record_seen_key(node, exc.key)
            raise HostKeyRefused(
                f"Node {node.name}'s host key changed: it now presents {seen.fingerprint} "
                f"({seen.key_type}), not the approved key. Refusing to connect; if the node "
                "was reinstalled, an admin must approve the new key."
            ) from exc
        except HostKeyRefused:
            client.close()
            raise
        except paramiko.AuthenticationException as exc:
            client.close()
            raise NodeUnreachable(
                f"Node {node.name} refused gpulab's key for user {node.ssh_user}: {exc}"
            ) from exc
        except (TimeoutError, OSError, paramiko.SSHException) as exc:
            client.close()
            last_error = exc
            logger.info("SSH to %s failed (try %s of %s): %s", node.name, attempt, attempts, exc)
            if attempt < attempts:
                time.sleep(min(2 ** (attempt - 1), 5))
            continue
        try:
            yield NodeSession(node=node, client=client, timeout=timeout)
        finally:
            client.close()
        return
    raise NodeUnreachable(f"Node {node.name} is unreachable over SSH: {last_error}")


@dataclass
class NodeSession:
    node: Node
    client: paramiko.SSHClient
    timeout: float

    def run(
        self, script: str, *, timeout: float | None = None, max_bytes: int = MAX_OUTPUT_BYTES
    ) -> CommandResult:
        """Run `script` with `sh -c` (whatever the login shell is), return its output.

        `script` is shell text built by `agents.runtimes` from quoted pieces only.
        `timeout` bounds the whole command, not each read: one that keeps printing
        still ends then. Both streams are read as they arrive (reading stdout to its end
        first would deadlock on a command that fills the SSH window with stderr), and
        each keeps only its last `max_bytes`.
        """
        command = shlex.join(["sh", "-c", script])
        limit = timeout or self.timeout
        deadline = time.monotonic() + limit
        out, err = _Tail(max_bytes), _Tail(max_bytes)
        channel: paramiko.Channel | None = None
        try:
            transport = self.client.get_transport()
            if transport is None or not transport.is_active():
                raise paramiko.SSHException("the SSH connection is closed")
            channel = transport.open_session(timeout=limit)
            channel.exec_command(command)
            channel.shutdown_write()  # nothing to send: a command reading stdin gets EOF
            while True:
                # EOF is read before the buffers: paramiko's thread adds the last data and
                # then the EOF, so data seen after EOF was known is all the data there is.
                ended = channel.eof_received or channel.closed
                if channel.recv_ready():
                    out.add(channel.recv(_READ_CHUNK))
                if channel.recv_stderr_ready():
                    err.add(channel.recv_stderr(_READ_CHUNK))
                drained = not channel.recv_ready() and not channel.recv_stderr_ready()
                if drained and ended:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    # Not TimeoutError: the except below would pass it off as the network
                    # failing, which a launch blames on the node.
                    raise CommandTimedOut(
                        f"Command on node {self.node.name} ran too long: no end after {limit:g} s."
                    )
                if drained:
                    # The channel's fileno turns readable on data on either stream or EOF.
                    select.select([channel], [], [], min(remaining, 1.0))
            if not channel.status_event.wait(max(deadline - time.monotonic(), 0.1)):
                raise CommandTimedOut(
                    f"Command on node {self.node.name} ran too long: no exit status after "
                    f"{limit:g} s."
                )
            status = channel.recv_exit_status()
        except (TimeoutError, OSError, paramiko.SSHException) as exc:
            raise NodeUnreachable(f"Command on node {self.node.name} failed: {exc}") from exc
        finally:
            if channel is not None:
                channel.close()
        return CommandResult(exit_status=status, stdout=out.text(), stderr=err.text())


class _Tail:
    """The last `limit` bytes written to it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = bytearray()

    def add(self, chunk: bytes) -> None:
        self.buffer += chunk
        # Trimmed in batches, not at every chunk, so keeping the tail stays linear.
        if len(self.buffer) > 2 * self.limit:
            del self.buffer[: len(self.buffer) - self.limit]

    def text(self) -> str:
        return bytes(self.buffer[-self.limit :]).decode(errors="replace")
