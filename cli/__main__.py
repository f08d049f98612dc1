"""`gpulab`: submit, watch and cancel your jobs from a terminal, over the REST API.

    gpulab login --url https://gpulab.example.edu      # asks for an API token once
    gpulab submit --gpus 2 --type a100 pytorch/pytorch:2.4.0 -- python train.py --lr 0.1
    gpulab submit --interactive jupyter/base-notebook -- jupyter lab --ip=0.0.0.0 --no-browser
    gpulab jobs                                        # your active jobs, as squeue
    gpulab wait 42                                     # live status until it ends
    gpulab logs -f 42                                  # follow its stdout
    gpulab cancel 42
    gpulab quota                                       # your and your groups' quotas, as sshare

The server and token come from GPULAB_URL and GPULAB_TOKEN, or from the file `gpulab
login` writes (~/.config/gpulab/config.json, mode 600). Standard library only: `pip
install ./cli` from a gpulab checkout, or `python -m cli` in one.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from .client import ApiError, Client
from .render import (
    QUOTA_HEADERS,
    duration,
    job_status_line,
    log_new_part,
    parse_time,
    quota_rows,
    session_fields,
    since,
    start_estimate,
    table,
    walltime_seconds,
)

ACTIVE_STATES = ("PENDING", "STARTING", "RUNNING", "PREEMPTING", "LOST")
TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
POLL_SECONDS = 2.0
START_READ_LIMIT = 2000  # pending jobs `jobs --start` reads to find the soonest


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpulab" / "config.json"


def settings_read(url_flag: str | None) -> tuple[str, str]:
    """The server and token: flag or GPULAB_URL, GPULAB_TOKEN, then the config file.

    The saved token goes only to the server it was saved for: a mistyped --url (or http
    for https) must not receive it.
    """
    stored: dict[str, str] = {}
    path = config_path()
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"gpulab: cannot read {path}: {exc}") from None
        if not isinstance(stored, dict):
            raise SystemExit(f"gpulab: {path} is not what `gpulab login` writes; log in again")
    url = url_flag or os.environ.get("GPULAB_URL") or stored.get("url", "")
    token = os.environ.get("GPULAB_TOKEN", "")
    if not token and stored.get("token"):
        if _same_server(url, stored.get("url", "")):
            token = stored["token"]
        elif url:
            raise SystemExit(
                f"gpulab: the saved token is for {stored.get('url')}, not {url}: run "
                f"`gpulab login --url {url}`, or set GPULAB_TOKEN."
            )
    if not url or not token:
        raise SystemExit(
            "gpulab: no server or token: run `gpulab login --url https://your-gpulab`, or "
            "set GPULAB_URL and GPULAB_TOKEN (an API token from the web page API tokens)."
        )
    return url, token


def _same_server(one: str, other: str) -> bool:
    return one.strip().rstrip("/") == other.strip().rstrip("/")


# Characters a terminal acts on (escape sequences, a carriage return that rewrites a line,
# a bell): shown as \x1b and the like, so another user's job name or a server's error
# cannot recolour, clear or forge lines on the reader's terminal.
_CONTROL = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [
        *range(0x20),
        *range(0x7F, 0xA0),
        # Unicode's line breaks and direction marks, overrides and isolates: text that
        # would reorder or break what is printed around it.
        0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
    ]
}  # fmt: skip


def shown(text: object) -> str:
    """`text` for a terminal: control characters made visible (a job's own log, which
    its owner asked for, is the only thing printed raw)."""
    return str(text).translate(_CONTROL)


# Another user's log keeps its lines and tabs; all else a terminal acts on is made visible.
_LOG_CONTROL = {code: text for code, text in _CONTROL.items() if chr(code) not in "\n\t"}


def shown_log(text: str) -> str:
    """Someone else's log (an admin's or a coordinator's read) for a terminal: the job
    wrote it, so it must not retitle, clear or forge lines on the reader's terminal."""
    return text.translate(_LOG_CONTROL)


# --------------------------------------------------------------------------- commands


def cmd_login(args: argparse.Namespace, out: TextIO) -> int:
    url = args.url or os.environ.get("GPULAB_URL")
    if not url:
        raise SystemExit("gpulab: give the server: gpulab login --url https://your-gpulab")
    if sys.stdin.isatty():
        token = getpass.getpass("API token (from the web page API tokens): ").strip()
    else:
        token = sys.stdin.readline().strip()
    if not token:
        raise SystemExit("gpulab login: no token given (create one on the web page API tokens)")
    client = Client(url, token)
    client.request("GET", "/api/v1/jobs/", params={"state": "RUNNING"})  # the token works
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created private: the token is as good as the password for the API.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as stored:
        json.dump({"url": url, "token": token}, stored)
    os.chmod(path, 0o600)
    print(f"Logged in to {url}; saved in {path}.", file=out)
    return 0


def cmd_submit(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise SystemExit("gpulab submit: give the command after the image: IMAGE -- ARGV...")
    if command[0].startswith("-"):
        # `gpulab submit img --gpus 3 python x.py`: everything after the image is the
        # job's argv, so the option would have become the program.
        raise SystemExit(
            f"gpulab submit: the command starts with {command[0]!r}: put gpulab's options "
            "before the image (IMAGE -- ARGV...)"
        )
    spec: dict[str, Any] = {
        "image": args.image,
        "command": command,
        "num_gpus": args.gpus,
        "accepted_types": args.type or [],
        "max_retries": args.retries,
    }
    for name, value in (
        ("name", args.name),
        ("group", args.group),
        ("consolidation", args.consolidation),
    ):
        if value is not None:
            spec[name] = value
    if args.env:
        spec["env"] = args.env
    if args.time is not None:
        spec["walltime_seconds"] = args.time
    if args.dependency is not None:
        spec["dependency"], spec["depends_on"] = args.dependency
    if args.mail_type is not None:
        spec["notify"] = MAIL_TYPES[args.mail_type]
    if args.array is not None:
        spec["array_size"], cap = args.array
        if cap is not None:
            spec["array_max_running"] = cap
    if args.interactive:
        spec["interactive"] = True
    try:
        job = client.submit(spec)
    except ApiError as exc:
        raise ApiError(exc.status, _with_flags(exc.message), exc.code) from None
    if job.get("array"):
        first, size = job["id"], job["array"]["size"]
        print(
            f"Submitted array {job['array']['id']}: {size} jobs from {first} "
            f"(gpulab jobs --array {job['array']['id']}).",
            file=out,
        )
        return 0
    if args.wait:  # its first status line is the watch's
        print(f"Submitted job {job['id']}.", file=out)
        return watch(client, job["id"], out=out, interval=args.interval)
    print(f"Submitted job {job['id']}: {shown(job_status_line(job, _now()))}", file=out)
    if job.get("interactive"):
        print(f"Once it runs, `gpulab show {job['id']}` says where to open it.", file=out)
    return 0


# Slurm's --mail-type names, as the API's `notify` values.
MAIL_TYPES = {"NONE": "", "END": "end", "FAIL": "fail", "ALL": "all"}

# The submission's fields as this command's options, so an error names what was typed.
FIELD_FLAGS = {
    "num_gpus": "--gpus",
    "accepted_types": "--type",
    "walltime_seconds": "--time",
    "max_retries": "--retries",
    "env": "--env",
    "name": "--name",
    "group": "--group",
    "consolidation": "--consolidation",
    "depends_on": "--dependency",
    "dependency": "--dependency",
    "array_size": "--array",
    "array_max_running": "--array",
    "notify": "--mail-type",
    "interactive": "--interactive",
    "command": "the command",
    "image": "the image",
}


def _with_flags(message: str) -> str:
    for field, flag in FIELD_FLAGS.items():
        if message.startswith(f"{field}: ") or f"; {field}: " in message:
            message = message.replace(f"{field}: ", f"{flag} ({field}): ", 1)
    return message


def cmd_jobs(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    states = [state.upper() for state in args.state] if args.state else []
    if not states and not args.all:
        states = list(ACTIVE_STATES)
    if args.array is not None and not args.state:
        states = []  # an array's tasks, whatever their state
    if args.start:
        states = ["PENDING"]  # Slurm's squeue --start: pending jobs, soonest first
    # The API lists newest first, and the soonest to start are mostly the oldest: --start
    # reads them all (up to START_READ_LIMIT), sorts, then keeps --limit.
    read_limit = START_READ_LIMIT if args.start else args.limit
    jobs = list(client.jobs(states=states, owner=args.owner, array=args.array, limit=read_limit))
    if args.start:
        if client.jobs_total > len(jobs):
            print(
                f"Only the newest {len(jobs)} of {client.jobs_total} pending jobs were read.",
                file=sys.stderr,
            )
        jobs = sorted(jobs, key=_expected_start_key)[: args.limit]
    if args.json:
        json.dump(jobs, out, indent=2)
        print(file=out)
        return 0
    if not jobs:
        print("No jobs.", file=out)
        return 0
    now = _now()
    rows = []
    for job in jobs:
        if args.start:
            estimate = start_estimate(job, now) or ""
            # "in about 35m00s": the likely range is for `show`, the table keeps one column.
            time_column = (
                estimate.removeprefix("starts ").split(" (")[0]
                if estimate.startswith("starts ")
                else "-"
            )
        elif job["state"] == "PENDING":
            time_column = since(job["submitted_at"], now)
        elif job["state"] in TERMINAL_STATES:
            time_column = since(job["finished_at"], now) + " ago"
        else:
            time_column = since(job["started_at"], now)
        cells = [
            job["id"],
            # Marked in the name's column: one more column would crowd out the reason.
            f"{job['name']} (session)" if job.get("interactive") else job["name"],
            job["owner"],
            job["state"],
            job["num_gpus"],
            ",".join(job["accepted_types"]) or "any",
            job["queue_position"] or "-",
            time_column,
            job["reason"],
        ]
        rows.append([shown(cell) for cell in cells])
    time_header = "START" if args.start else "TIME"
    headers = ["ID", "NAME", "OWNER", "STATE", "GPUS", "TYPES", "POS", time_header, "REASON"]
    width = _columns() if out.isatty() else 0
    print(table(headers, rows, width=width), file=out)
    if client.jobs_total > len(jobs):
        print(f"{len(jobs)} of {client.jobs_total} shown (--limit).", file=sys.stderr)
    return 0


def _expected_start_key(job: dict) -> tuple[bool, float, bool, int]:
    """Soonest expected start first; jobs without an estimate last, by queue position."""
    at = parse_time((job.get("estimated_start") or {}).get("at"))
    position = job.get("queue_position")
    return (at is None, at.timestamp() if at else 0.0, position is None, position or 0)


def _columns() -> int:
    # 0 where the terminal does not say (Python 3.9 in some ptys): the usual width then.
    return shutil.get_terminal_size((120, 24)).columns or 120


def cmd_show(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    job = client.job(args.job)
    if args.json:
        json.dump(job, out, indent=2)
        print(file=out)
        return 0
    print(shown(job_status_line(job, _now())), file=out)
    fields = [
        ("name", job["name"]),
        ("owner", job["owner"] + (f" ({job['group']})" if job.get("group") else "")),
        ("image", job["image"]),
        ("command", shlex.join(job["command"])),
        ("gpus", f"{job['num_gpus']} × {', '.join(job['accepted_types']) or 'any type'}"),
        ("walltime", duration(job["walltime_seconds"]) if job["walltime_seconds"] else "none"),
        ("attained", f"{job['attained_gpu_hours']} GPU-hours (normalized)"),
        ("attempt", f"{job['attempt']}, preempted {job['preemption_count']} times"),
        ("submitted", job["submitted_at"]),
    ]
    estimate = start_estimate(job, _now())
    if estimate:
        fields.append(("start", estimate))
    if job.get("depends_on"):
        ids = ", ".join(f"#{pk}" for pk in job["depends_on"])
        goal = "succeed" if job.get("dependency") == "afterok" else "end"
        fields.append(("waits for", f"{ids} to {goal}"))
    fields.extend(session_fields(job))
    for name, value in fields:
        print(f"  {name:<10} {shown(value)}", file=out)
    if job.get("events"):
        print("history:", file=out)
        for event in job["events"]:
            change = f"{event['from_state'] or '-'} → {event['to_state']}"
            print(f"  {event['created_at']}  {change:<24} {shown(event['message'])}", file=out)
    return 0


def cmd_quota(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    """Your own account and each of your groups: used against each limit (Slurm's sshare)."""
    accounts = client.quotas()
    if args.json:
        json.dump(accounts, out, indent=2)
        print(file=out)
        return 0
    rows = [[shown(cell) for cell in row] for row in quota_rows(accounts)]
    width = _columns() if out.isatty() else 0
    print(table(QUOTA_HEADERS, rows, width=width), file=out)
    return 0


def cmd_cancel(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    if not args.jobs and args.array is None:
        raise SystemExit("gpulab cancel: give job ids, or --array ID")
    failed = 0
    if args.array is not None:  # every task not ended, in one go (Slurm's scancel ARRAY)
        try:
            done = client.cancel_array(args.array)
        except ApiError as exc:
            print(f"gpulab: array {args.array}: {shown(exc.message)}", file=sys.stderr)
            failed += 1
        else:
            ids = ", ".join(str(pk) for pk in done["cancelled"]) or "nothing left to cancel"
            print(f"Cancelled array {args.array}: {ids}.", file=out)
    job_ids = list(args.jobs)
    for job_id in job_ids:
        try:
            job = client.cancel(job_id)
        except ApiError as exc:
            print(f"gpulab: job {job_id}: {shown(exc.message)}", file=sys.stderr)
            failed += 1
            continue
        print(f"Cancelled job {job['id']} ({job['state']}).", file=out)
    return 1 if failed else 0


def cmd_logs(
    args: argparse.Namespace,
    client: Client,
    out: TextIO,
    *,
    sleep: Callable[[float], None] = time.sleep,
    err: TextIO | None = None,
) -> int:
    stream = "stderr" if args.stderr else "stdout"
    job = client.job(args.job)
    # The owner's own log is printed as written (its colours, its progress bars); anyone
    # else's (an admin's or a coordinator's read) could drive the reader's terminal.
    as_written = job["owner"] == client.username()

    def write(text: str) -> None:
        out.write(text if as_written else shown_log(text))
        out.flush()

    if not args.follow:
        write(client.logs(args.job, stream)["text"])
        return 0
    text = _first_log(client, job, stream, interval=args.interval, sleep=sleep, err=err)
    write(text)
    while True:
        job = patiently(lambda: client.job(args.job), sleep=sleep, err=err)
        if job["state"] in TERMINAL_STATES:
            # Read once more: what it wrote between the last read and its end.
            write(log_new_part(text, _logs_text(client, args.job, stream, text)))
            return 0
        sleep(args.interval)
        newer = _logs_text(client, args.job, stream, text)
        write(log_new_part(text, newer))
        text = newer


def _first_log(
    client: Client,
    job: dict[str, Any],
    stream: str,
    *,
    interval: float,
    sleep: Callable[[float], None],
    err: TextIO | None,
) -> str:
    """A followed log's first read: the server or the node away for a while is ridden
    out, and a job that has not started yet is waited for (said once, on stderr)."""
    job_id, said = job["id"], False
    while True:
        try:
            return patiently(lambda: client.logs(job_id, stream), sleep=sleep, err=err)["text"]
        except ApiError as exc:
            # A 404 for a job just read: no attempt has run (or its node has no log yet).
            # One that ended without starting has no log to wait for.
            if exc.status != 404 or job["state"] in TERMINAL_STATES:
                raise
        if not said:
            print(
                f"gpulab: job {job_id} has not started ({shown(job['state'])}); waiting for it",
                file=err or sys.stderr,
            )
            said = True
        sleep(interval)
        job = patiently(lambda: client.job(job_id), sleep=sleep, err=err)


def _logs_text(client: Client, job_id: int, stream: str, last: str) -> str:
    """The tail now, or the last one read when the node (503) or the server cannot be
    read this moment."""
    try:
        return client.logs(job_id, stream)["text"]
    except ApiError as exc:
        if exc.status in TRANSIENT_STATUSES:  # 503: also the node's log not readable now
            return last
        raise


# Not an answer about the job: the server restarting (a deploy), a proxy in between
# failing. Following a job rides them out rather than exiting as a failed job would.
TRANSIENT_STATUSES = (0, 502, 503, 504)
RETRY_MAX_SECONDS = 30.0


def patiently(
    call: Callable[[], Any],
    *,
    sleep: Callable[[float], None] = time.sleep,
    err: TextIO | None = None,
) -> Any:
    """`call()`, tried again with a growing pause while the server cannot be reached;
    one line on stderr when it stops answering and one when it is back."""
    pause, said = 1.0, False
    while True:
        try:
            result = call()
        except ApiError as exc:
            if exc.status not in TRANSIENT_STATUSES:
                raise
            if not said:
                print(f"gpulab: {shown(exc.message)[:200]}; trying again", file=err or sys.stderr)
                said = True
            sleep(pause)
            pause = min(pause * 2, RETRY_MAX_SECONDS)
            continue
        if said:
            print("gpulab: the server answers again", file=err or sys.stderr)
        return result


def cmd_wait(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    return watch(client, args.job, out=out, interval=args.interval)


def watch(
    client: Client,
    job_id: int,
    *,
    out: TextIO,
    interval: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow a job until it ends, then exit as it did: 0 when it succeeded, its exit
    code when it failed (1 without one), 1 when it was cancelled.

    On a terminal one line is redrawn in place (its queue position while it waits, a
    bar against its walltime while it runs); elsewhere a line is printed per change.
    """
    live = out.isatty()
    printed: tuple[str, Any] | None = None
    answered = False
    while True:
        # Outages are ridden out only once the server has answered: a wrong address (or
        # a server that is down when the command starts) fails at once.
        job = patiently(lambda: client.job(job_id), sleep=sleep) if answered else client.job(job_id)
        answered = True
        line = shown(job_status_line(job, _now()))
        if live:
            out.write("\r\033[K" + line[: _columns() - 1])
            out.flush()
        elif (job["state"], job.get("queue_position")) != printed:
            # Off a terminal (a log file, a pipe), a line when the state or the queue
            # position changes, not every tick.
            print(line, file=out)
            printed = (job["state"], job.get("queue_position"))
        if job["state"] in TERMINAL_STATES:
            if live:
                print(file=out)
            if job["state"] == "SUCCEEDED":
                return 0
            if job["state"] == "FAILED" and job.get("exit_code"):
                return max(1, min(int(job["exit_code"]), 255))
            return 1
        sleep(interval)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# --------------------------------------------------------------------------- arguments


def _walltime(text: str) -> int:
    try:
        return walltime_seconds(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give minutes (90), HH:MM:SS, D-HH:MM or 2h30m"
        ) from None


def _dependency(text: str) -> tuple[str, list[int]]:
    """Slurm's `--dependency` form: `afterok:12:13`, `afterany:12`; bare ids mean afterok."""
    kind, colon, rest = text.partition(":")
    if not colon:
        kind, rest = "afterok", text
    ids = [part for part in rest.replace(",", ":").split(":") if part]
    if kind not in ("afterok", "afterany") or not ids or not all(i.isdigit() for i in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: give afterok:ID[:ID...] or afterany:ID...")
    return kind, [int(i) for i in ids]


def _array(text: str) -> tuple[int, int | None]:
    """Slurm's `--array` count with its cap: `10` (10 tasks), `10%2` (at most 2 running)."""
    size, percent, cap = text.partition("%")
    if not size.isdigit() or (percent and not cap.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give N tasks, or N%K to run K at once")
    return int(size), int(cap) if percent else None


def _env_pair(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=value")
    return name, value


class _EnvCollect(argparse.Action):
    """`-e NAME=value`, repeated, into one dict. A name given twice is refused, as the API
    refuses it: keeping the last value without a word would run with a value not meant."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name, value = values
        env = dict(getattr(namespace, self.dest) or {})
        if name in env:
            parser.error(f"--env: {name} is given twice; give each variable once.")
        env[name] = value
        setattr(namespace, self.dest, env)


class _DependencyCollect(argparse.Action):
    """`-d`, repeated, as one dependency: `-d afterok:12 -d 13` waits for both, as
    `afterok:12:13` does. The API takes one kind for all of a job's dependencies, so
    afterok and afterany together are refused rather than one of them dropped."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        kind, ids = values
        before = getattr(namespace, self.dest)
        if before is not None:
            if before[0] != kind:
                parser.error(
                    f"--dependency: {before[0]} and {kind} together; a job waits for all its "
                    "dependencies one way: give one kind (bare ids are afterok)."
                )
            ids = [*before[1], *ids]
        setattr(namespace, self.dest, (kind, ids))


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, 1 or more")
    return int(text)


URL_HELP = "The gpulab server (default: GPULAB_URL, or the one `gpulab login` saved)."


def parser_build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpulab", description="Submit, watch and cancel gpulab jobs."
    )
    parser.add_argument("--url", help=URL_HELP)
    # Also after the command (`gpulab login --url …`, as the docs write it); not given
    # there, the one before the command (or none) stands.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    add_parser = functools.partial(commands.add_parser, parents=[common])

    login = add_parser("login", help="Save the server and an API token.")
    login.set_defaults(handler=cmd_login, needs_client=False)

    submit = add_parser(
        "submit",
        help="Submit a job: gpulab submit [options] IMAGE -- ARGV...",
        description="Everything after IMAGE is the command, passed as argv (no shell).",
    )
    submit.add_argument("--gpus", "-g", type=int, default=1, help="GPUs (default 1).")
    submit.add_argument(
        "--type", "-t", action="append", help="An accepted GPU type (repeat; default any)."
    )
    submit.add_argument("--name", "-n", help="Job name (default: from the command).")
    submit.add_argument(
        "--env", "-e", action=_EnvCollect, type=_env_pair, help="NAME=value (repeat)."
    )
    submit.add_argument(
        "--time", type=_walltime, help="Walltime: minutes (90), HH:MM:SS, D-HH[:MM[:SS]] or 2h30m."
    )
    submit.add_argument("--retries", type=int, default=0, help="Retries after a failure.")
    submit.add_argument("--group", help="Charge one of your lab groups (default yours).")
    submit.add_argument("--consolidation", choices=["required", "preferred", "any"])
    submit.add_argument(
        "--dependency",
        "-d",
        action=_DependencyCollect,
        type=_dependency,
        help="Start after jobs of yours: afterok:12:13 (they succeeded) or afterany:12 "
        "(repeat to add jobs, of one kind).",
    )
    submit.add_argument(
        "--mail-type",
        type=str.upper,
        choices=list(MAIL_TYPES),
        help="Email yourself: END, FAIL (only if it fails), ALL (start and end), NONE.",
    )
    submit.add_argument(
        "--array",
        "-a",
        type=_array,
        help="N copies (GPULAB_ARRAY_INDEX 0..N-1), or N%%K to run at most K at once.",
    )
    submit.add_argument(
        "--interactive",
        "-i",
        action="store_true",
        help="An interactive session (e.g. jupyter lab --ip=0.0.0.0 --no-browser): never "
        "preempted, a bounded walltime (the lab's default when --time is not given), a port "
        "and a token in its environment; `gpulab show ID` gives the address.",
    )
    submit.add_argument("--wait", "-w", action="store_true", help="Then follow it to its end.")
    submit.add_argument("--interval", type=float, default=POLL_SECONDS, help=argparse.SUPPRESS)
    submit.add_argument("image")
    submit.add_argument("command", nargs=argparse.REMAINDER)
    submit.set_defaults(handler=cmd_submit)

    jobs = add_parser("jobs", help="List jobs (default: your active ones).")
    jobs.add_argument("--all", "-a", action="store_true", help="Finished ones too.")
    jobs.add_argument("--state", "-s", action="append", help="Only this state (repeat).")
    jobs.add_argument("--owner", "-u", help="Only this user's (admins, coordinators).")
    jobs.add_argument("--array", type=int, help="This array's tasks, in any state, by index.")
    jobs.add_argument("--limit", type=_positive, default=50, help="At most this many (default 50).")
    jobs.add_argument("--json", action="store_true", help="As the API's JSON.")
    jobs.add_argument(
        "--start",
        action="store_true",
        help="Pending jobs with their estimated start, soonest first (squeue --start).",
    )
    jobs.set_defaults(handler=cmd_jobs)

    show = add_parser("show", help="A job's details and history.")
    show.add_argument("job", type=int)
    show.add_argument("--json", action="store_true", help="As the API's JSON.")
    show.set_defaults(handler=cmd_show)

    quota = add_parser(
        "quota",
        help="Your quotas and your groups': GPUs and jobs in use against each limit.",
        description="GPUs and jobs in use / limit (- : no limit) for your own account and "
        "each of your lab groups; a group counts every member's jobs charged to it.",
    )
    quota.add_argument("--json", action="store_true", help="As the API's JSON.")
    quota.set_defaults(handler=cmd_quota)

    logs = add_parser("logs", help="A job's log tail (stdout, or --stderr).")
    logs.add_argument("job", type=int)
    logs.add_argument("--stderr", action="store_true")
    logs.add_argument("--follow", "-f", action="store_true", help="Until the job ends.")
    logs.add_argument("--interval", type=float, default=POLL_SECONDS, help=argparse.SUPPRESS)
    logs.set_defaults(handler=cmd_logs)

    wait = add_parser("wait", help="Follow a job to its end; exit as it did.")
    wait.add_argument("job", type=int)
    wait.add_argument("--interval", type=float, default=POLL_SECONDS, help=argparse.SUPPRESS)
    wait.set_defaults(handler=cmd_wait)

    cancel = add_parser("cancel", help="Cancel jobs of yours.")
    cancel.add_argument("jobs", type=int, nargs="*", metavar="JOB")
    cancel.add_argument("--array", type=int, help="Also every task of this array not ended.")
    cancel.set_defaults(handler=cmd_cancel)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = parser_build()
    args = parser.parse_args(argv)
    if getattr(args, "start", False) and (args.state or args.all):
        # --start lists pending jobs only: taking --state or --all silently would print
        # something other than what was asked for.
        parser.error("jobs --start lists pending jobs; it takes neither --state nor --all.")
    if getattr(args, "wait", False) and args.array is not None:
        # Exiting 0 at once, as if it had been followed, would say the tasks succeeded.
        parser.error(
            "submit --wait follows a single job, not an array: list its tasks with "
            "`gpulab jobs --array ID` (the array id submit prints)."
        )
    try:
        if not getattr(args, "needs_client", True):
            return args.handler(args, out)
        url, token = settings_read(args.url)
        return args.handler(args, Client(url, token), out)
    except ApiError as exc:
        print(f"gpulab: {shown(exc.message)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except EOFError:  # Ctrl-D at the token prompt
        print(file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`gpulab jobs | head`): nothing more to say, and nothing
        # for Python to complain about when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
