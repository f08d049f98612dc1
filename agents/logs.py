"""Reading a job's log tail for a person: the page's fragment and the REST API share it.

An attempt that has ended is read from the copy kept in the database (`AttemptLog`,
made within a minute of its end by `agents.node_logs_archive`), without SSH. Otherwise
(a running attempt, or an ended one not copied yet) it is read from the node: over SSH
inside a web request, so kept short: one connect attempt with short timeouts (not the
tasks' retries), one request at a time per attempt (N open pages of a job on a hung node
would hold N web threads), a failure remembered for a short while instead of retried on
every poll, and a DOWN node not tried at all. What went wrong is said in two parts:
`problem`, for everyone, and `detail` (addresses, key paths, host keys), for admins only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings

from cluster.choices import NodeState
from cluster.models import Node
from config.errors import ApplicationError, NotFound
from config.fail_open_cache import cache_add, cache_delete, cache_get, cache_set
from jobs.choices import HOLDING_STATES
from jobs.models import Job

from .runtimes import LOG_TAIL_BYTES
from .selectors import attempt_log_get, finished_attempt_removed, node_of_attempt
from .services import agent_logs_tail
from .ssh import SshBudget

logger = logging.getLogger(__name__)

# After a node fails to answer, readers are told so from the cache for this long.
LOG_UNREACHABLE_BACKOFF_SECONDS = 30
# A web read waits at most this long on each SSH step, and connects once: the tasks' budget
# (GPULAB_SSH_CONNECT_ATTEMPTS × GPULAB_SSH_TIMEOUT_SECONDS plus pauses, 33 s by default)
# against a node that accepts TCP but never answers outlasted gunicorn's worker timeout.
LOG_READ_STEP_SECONDS = 5.0
# The steps a read may wait on, each up to its timeout: TCP connect, key exchange, login,
# opening the channel, the command itself.
LOG_READ_STEPS = 5
NOT_STARTED = "No logs yet: the job has not started."


@dataclass(frozen=True)
class LogTail:
    stream: str
    text: str = ""
    lines: int = 0
    problem: str = ""  # said instead of the log when it cannot be shown
    detail: str = ""  # the technical cause (addresses, host keys): shown to admins only
    not_started: bool = False  # no attempt has run: there is no log anywhere
    unavailable: bool = False  # there is one, but its node cannot be read now
    removed: bool = False  # there was one, but the node has removed it (kept N days)
    archived: bool = False  # read from the copy kept when the attempt ended, not the node


def job_log_tail(*, job: Job, stream: str, max_lines: int | None = None) -> LogTail:
    """The last lines of the current attempt's `stream`, or why they cannot be shown.

    Never raises for node trouble: callers say "cannot reach the node", not fail.
    """
    if job.attempt == 0:
        return LogTail(stream, problem=NOT_STARTED, not_started=True)
    node = node_of_attempt(job_id=job.pk, attempt=job.attempt)
    # Only an attempt that is over can have been removed: a live one (the page that
    # refreshes every few seconds) costs no extra query.
    over = job.state not in HOLDING_STATES
    if over and (archived := attempt_log_get(job_id=job.pk, attempt=job.attempt)) is not None:
        if not archived.found:
            return LogTail(
                stream,
                problem=f"This attempt's log was no longer on {_where(node)} when it ended, "
                "so it could not be kept.",
                removed=True,
            )
        return _shown(stream, getattr(archived, stream), max_lines, archived=True)
    if over and node is not None and not node.simulated and finished_attempt_removed(job=job):
        days = settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS
        return LogTail(
            stream,
            problem=f"This attempt ended more than {days} days ago, so its log has been "
            f"removed from {node.name} (finished attempts are kept {days} days).",
            removed=True,
        )
    if node is not None and node.state == NodeState.DOWN:
        return LogTail(
            stream,
            problem=f"Node {node.name} is down, so its logs cannot be read now.",
            unavailable=True,
        )
    # Per node: every job's page on a node that did not answer is told so without SSH,
    # not only the job whose read found out.
    backoff_key = (
        f"jobs:logs-unreachable-node:{node.pk}"
        if node is not None
        else f"jobs:logs-unreachable:{job.pk}:{job.attempt}"
    )
    if (detail := cache_get(backoff_key)) is not None:
        return _unreachable(stream, node, detail)
    budget = SshBudget(
        connect_attempts=1,
        timeout=min(settings.GPULAB_SSH_TIMEOUT_SECONDS, LOG_READ_STEP_SECONDS),
    )
    # One request at a time reads an attempt's log over SSH; the others are told so rather
    # than pile onto a node that may be hung. The key expires by itself, after the longest
    # a read can take, in case its reader dies before deleting it.
    reading_key = f"jobs:logs-reading:{job.pk}:{job.attempt}"
    if not cache_add(reading_key, timeout=budget.timeout * LOG_READ_STEPS + 5):
        return LogTail(
            stream,
            problem=f"The log is being read from {_where(node)} for another viewer; "
            "try again in a few seconds.",
            unavailable=True,
        )
    try:
        text = agent_logs_tail(
            job_id=job.pk, stream=stream, max_bytes=LOG_TAIL_BYTES, budget=budget
        )
    except NotFound:
        return LogTail(stream, problem=NOT_STARTED, not_started=True)
    except (ApplicationError, OSError) as exc:
        # NodeUnreachable, HostKeyRefused, no SSH key configured; OSError in case a
        # network error ever slips past agents.ssh's wrapping.
        detail = exc.message if isinstance(exc, ApplicationError) else str(exc)
        logger.info("Log of job %s not readable: %s", job.pk, detail)
        cache_set(backoff_key, detail, timeout=LOG_UNREACHABLE_BACKOFF_SECONDS)
        return _unreachable(stream, node, detail)
    finally:
        cache_delete(reading_key)
    if not text and node is not None and node.simulated:
        # agents.simulated runs no process, so there is nothing to tail; say why.
        return LogTail(stream, problem=f"{node.name} is a simulated (demo) node: no log output.")
    return _shown(stream, text, max_lines)


def _shown(stream: str, text: str, max_lines: int | None, *, archived: bool = False) -> LogTail:
    """`text` as read (its last LOG_TAIL_BYTES), whole or as its last `max_lines` lines
    the way a terminal shows them."""
    if max_lines is None:
        return LogTail(stream, text=text, lines=len(_lines(text)), archived=archived)
    lines = [_as_shown(line) for line in _lines(text)]
    if _read_bytes(text) >= LOG_TAIL_BYTES and len(lines) > 1:
        lines = lines[1:]  # cut at a byte count: the first line is probably partial
    lines = lines[-max_lines:]
    return LogTail(stream, text="\n".join(lines), lines=len(lines), archived=archived)


def _lines(text: str) -> list[str]:
    """Lines as a terminal ends them: at \n only. `str.splitlines` also breaks at \r,
    so one progress bar redrawn with \r (tqdm) filled the whole window."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no new one
    return lines


def _as_shown(line: str) -> str:
    """What a terminal leaves of a line redrawn with \r: its last segment (a \r\n line
    end, or a trailing \r, erases nothing)."""
    return line.rstrip("\r").rpartition("\r")[2]


def _read_bytes(text: str) -> int:
    """How many bytes the node sent for `text`: at most LOG_TAIL_BYTES, LOG_TAIL_BYTES when
    the log was longer and cut. The reader decodes with errors="replace", which turns each
    invalid byte into U+FFFD, three bytes once encoded again: counted as the one byte it
    was, so a short log of binary output is not taken for a cut one. (A replacement that
    stood for a broken sequence of 2 or 3 bytes is undercounted: at worst a cut log then
    keeps its partial first line, never loses a whole one.)"""
    return len(text.encode()) - 2 * text.count("\ufffd")


def _where(node: Node | None) -> str:
    return f"node {node.name}" if node is not None else "its node"


def _unreachable(stream: str, node: Node | None, detail: str) -> LogTail:
    return LogTail(
        stream,
        problem=f"The log cannot be read from {_where(node)} right now.",
        detail=detail,
        unavailable=True,
    )
