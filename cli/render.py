"""What the command line prints, as pure functions: durations, tables, the progress bar,
and the new part of a log tail read again. No I/O here, so each is tested exactly."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from datetime import datetime

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def walltime_seconds(text: str) -> int:
    """A walltime as Slurm's `--time` takes it, or with a unit, in seconds.

    `90` (minutes, as in Slurm), `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`;
    or a number with a unit: `45s`, `30m`, `2h`, `1d`, `1h30m`. ValueError otherwise.
    """
    text = text.strip()
    if re.fullmatch(r"(\d+[smhd])+", text):
        return sum(
            int(amount) * _DURATION_UNITS[unit] for amount, unit in re.findall(r"(\d+)(\w)", text)
        )
    days = 0
    if "-" in text:
        day_text, _, text = text.partition("-")
        if not day_text.isdigit() or not text:
            raise ValueError(f"not a walltime: {day_text}-{text!r}")
        days = int(day_text)
        # After a day count, Slurm reads HH, HH:MM or HH:MM:SS.
        parts = text.split(":")
        if len(parts) > 3 or not all(part.isdigit() for part in parts):
            raise ValueError(f"not a walltime: {text!r}")
        hours, minutes, seconds = [*map(int, parts), 0, 0][:3]
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    parts = text.split(":")
    if not parts or len(parts) > 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"not a walltime: {text!r}")
    numbers = list(map(int, parts))
    if len(numbers) == 1:
        return numbers[0] * 60  # minutes
    if len(numbers) == 2:
        return numbers[0] * 60 + numbers[1]  # MM:SS
    return (numbers[0] * 60 + numbers[1]) * 60 + numbers[2]


def duration(seconds: float) -> str:
    """`45s`, `12m05s`, `3h07m`, `2d04h`: the two largest units, as squeue's TIME reads."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def since(text: str | None, now: datetime) -> str:
    """How long ago an API timestamp was, or `-`."""
    when = parse_time(text)
    return duration((now - when).total_seconds()) if when else "-"


def progress_bar(fraction: float, width: int = 24) -> str:
    """`[#########---------------]  37%`: `fraction` clamped to 0..1."""
    fraction = min(1.0, max(0.0, fraction))
    filled = round(fraction * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {fraction * 100:3.0f}%"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, width: int = 0) -> str:
    """Columns padded to their widest cell; the last column cut to fit `width` (0: never)."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(cell).ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        line = "  ".join([*cells, str(row[-1])]).rstrip()
        if width and len(line) > width:
            line = line[: max(width - 1, 0)] + "…"
        lines.append(line)
    return "\n".join(lines)


def start_estimate(job: dict, now: datetime) -> str | None:
    """`starts in about 35m (likely 20m-1h10m)`, the server's note where it has no
    estimate, or None (not pending, or not forecast yet)."""
    estimate = job.get("estimated_start")
    if not estimate:
        return None
    at = parse_time(estimate.get("at"))
    if at is None:
        return estimate.get("note") or None

    def within(moment: datetime) -> str:
        seconds = (moment - now).total_seconds()
        return f"in about {duration(seconds)}" if seconds >= 1 else "now"

    text = f"starts {within(at)}"
    earliest, latest = parse_time(estimate.get("earliest")), parse_time(estimate.get("latest"))
    if earliest and latest:
        text += f" (likely {within(earliest)} to {within(latest).removeprefix('in ')})"
    return text


def job_status_line(job: dict, now: datetime) -> str:
    """One line on where a job is: its state, queue position and reason while it waits,
    run time (against its walltime, as a bar) while it runs, the outcome once it ended."""
    state = job["state"]
    head = f"job {job['id']} {state}"
    if state == "PENDING":
        position = job.get("queue_position")
        where = f"position {position} in the queue" if position else "in the queue"
        waited = since(job.get("submitted_at"), now)
        estimate = start_estimate(job, now)
        starts = f"; {estimate}" if estimate and estimate.startswith("starts") else ""
        reason = f": {job['reason']}" if job.get("reason") else ""
        return f"{head}, {where}, waiting {waited}{reason}{starts}"
    if state in {"STARTING", "RUNNING", "PREEMPTING"}:
        started = parse_time(job.get("started_at"))
        ran = (now - started).total_seconds() if started else 0.0
        if job.get("run_seconds") is not None:
            # All attempts together, as the walltime counts them (not only this run).
            ran = float(job["run_seconds"])
        walltime = job.get("walltime_seconds")
        if walltime:
            return f"{head} {progress_bar(ran / walltime)} {duration(ran)} of {duration(walltime)}"
        return f"{head} for {duration(ran)}"
    if state == "FAILED" and job.get("exit_code") is not None:
        return f"{head} (exit {job['exit_code']}): {job.get('reason', '')}".rstrip(": ")
    return f"{head}: {job['reason']}" if job.get("reason") else head


def session_fields(job: dict) -> list[tuple[str, str]]:
    """`gpulab show`'s lines for an interactive session: where to open it (with `?token=`,
    as Jupyter takes it, only when the API gave the token: the owner's) and the ssh tunnel
    to run first when the lab has a gateway; a note while it has no address. [] otherwise."""
    if not job.get("interactive"):
        return []
    session = job.get("session")
    if not session:
        if job.get("state") in {"SUCCEEDED", "FAILED", "CANCELLED"}:
            return [("session", "ended")]
        return [("session", "no address yet: it appears once the session runs")]
    url = str(session.get("url") or "")
    token = session.get("token")
    if token:
        separator = "&" if "?" in url else "?"
        url = f"{url}{separator}{urllib.parse.urlencode({'token': token})}"
    fields = [("session", url), ("node", str(session.get("node") or ""))]
    if session.get("tunnel"):
        fields.append(("tunnel", str(session["tunnel"])))
    return fields


QUOTA_HEADERS = [
    "KIND",
    "NAME",
    "GPUS",
    "GUARANTEED",
    "BORROWED",
    "RUNNING",
    "PENDING",
    "TYPES",
    "LIMITS",
]


def quota_rows(accounts: Sequence[dict]) -> list[list[str]]:
    """`gpulab quota`'s rows, one per account of GET /api/v1/quotas/, as `sshare` lists
    associations: in use / limit (`-` for none), per-type caps, and the limits reached."""

    def of(used: int, limit: int | None) -> str:
        return f"{used}/{'-' if limit is None else limit}"

    def optional(value: int | None) -> str:
        return "-" if value is None else str(value)

    rows = []
    for account in accounts:
        types = ", ".join(
            f"{row['device_type']} {of(row['gpus_in_use'], row['max_gpus'])}"
            for row in account.get("device_types") or []
        )
        reached = account.get("at_limit") or []
        rows.append(
            [
                account["kind"],
                account["name"],
                of(account["gpus_in_use"], account["max_gpus"]),
                optional(account.get("guaranteed_gpus")),
                optional(account.get("borrowed_gpus")),
                of(account["running_jobs"], account["max_running_jobs"]),
                of(account["pending_jobs"], account["max_pending_jobs"]),
                types or "-",
                f"AT LIMIT: {', '.join(reached)}" if reached else "-",
            ]
        )
    return rows


def log_new_part(before: str, after: str) -> str:
    """What `after`, a log tail read again, adds to `before`, the previous read.

    Both are the last N bytes of the same growing log, so `after` is a suffix of `before`
    followed by what is new (or, when more than N bytes were written in between, all
    new). The end of `before` is looked for in `after`; where what precedes it in
    `after` is also the end of `before`, the rest is new. Not found: all of `after`.
    """
    if not before:
        return after
    anchor = before[-LOG_ANCHOR_CHARS:]
    found = after.rfind(anchor)
    while found >= 0:
        overlap = found + len(anchor)
        if before.endswith(after[:overlap]):
            return after[overlap:]
        found = after.rfind(anchor, 0, found + len(anchor) - 1)
    return after


# Enough of the previous read's end to find it again, rarely repeated in a real log.
LOG_ANCHOR_CHARS = 256
