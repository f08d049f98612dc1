"""Job traces for the simulator: the Tiresias CSV format, read strictly.

A Tiresias trace (``60_job.csv`` in the public simulator) has one row per job::

    job_id,num_gpu,submit_time,iterations,model_name,duration,interval

``duration`` is the run time in seconds of an uninterrupted run on the reference device
(speed 1.0); it is the only thing the simulator uses to decide when a job ends.
``iterations`` and ``interval`` are informational (the reference ignores them too).
gpulab also accepts the optional columns ``user`` and ``group`` (fair share, per-user
fairness metrics) and ``consolidation`` (``required | preferred | any``).

Bad input raises `TraceError` naming the file, line and field, because a silently
skipped row changes every average the simulator reports.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from scheduler.core.types import Consolidation

TIRESIAS_REQUIRED_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")
TIRESIAS_COLUMNS = (
    "job_id",
    "num_gpu",
    "submit_time",
    "iterations",
    "model_name",
    "duration",
    "interval",
)


class TraceError(ValueError):
    """A trace or cluster file that cannot be read; the message names where and why."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, as submitted.

    `duration` is seconds of uninterrupted work at throughput 1.0 (the reference device);
    on a device type where the job's throughput is x, the same work takes duration / x.
    """

    id: int
    num_gpus: int
    submit_time: float
    duration: float
    model: str = ""
    iterations: int = 0
    user: str = "default"
    group: str | None = None
    consolidation: Consolidation = Consolidation.PREFERRED
    # (device_type, throughput relative to the reference 1.0); empty = Device.speed is used.
    throughputs: tuple[tuple[str, float], ...] = ()
    accepted_types: tuple[str, ...] = ()

    @property
    def gpu_time(self) -> float:
        """GPU-seconds of an uninterrupted run at reference speed."""
        return self.duration * self.num_gpus


def _field(row: dict[str, str], name: str, where: str) -> str:
    value = row.get(name)
    if value is None or value.strip() == "":
        raise TraceError(f"{where}: field '{name}' is missing or empty")
    return value.strip()


def _int_field(row: dict[str, str], name: str, where: str, *, minimum: int) -> int:
    raw = _field(row, name, where)
    if re.fullmatch(r"[+-]?\d+", raw):
        number = int(raw)
    else:
        # Some traces write whole numbers as floats ("4.0"); a float is exact only up to
        # 2^53, and two ids past it could collapse into one.
        try:
            value = float(raw)
        except ValueError:
            raise TraceError(f"{where}: field '{name}' is not a number: {raw!r}") from None
        if not math.isfinite(value) or value != int(value) or abs(value) > 2**53:
            raise TraceError(f"{where}: field '{name}' must be a whole number, got {raw!r}")
        number = int(value)
    if number < minimum:
        raise TraceError(f"{where}: field '{name}' must be >= {minimum}, got {raw!r}")
    return number


def _float_field(row: dict[str, str], name: str, where: str, *, positive: bool) -> float:
    raw = _field(row, name, where)
    try:
        number = float(raw)
    except ValueError:
        raise TraceError(f"{where}: field '{name}' is not a number: {raw!r}") from None
    if not math.isfinite(number):
        raise TraceError(f"{where}: field '{name}' must be finite, got {raw!r}")
    if number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise TraceError(f"{where}: field '{name}' must be {bound}, got {raw!r}")
    return number


def load_tiresias_trace(path: str | Path) -> list[TraceJob]:
    """Read a Tiresias-format job trace, sorted by (submit time, id).

    Durations are kept as floats; the reference truncates them with `int(float(...))`,
    which changes nothing for its shipped traces (all whole seconds).
    """
    path = Path(path)
    try:
        # newline="" lets csv handle the CRLF endings of the shipped traces.
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [name.strip() for name in (reader.fieldnames or [])]
            missing = [name for name in TIRESIAS_REQUIRED_COLUMNS if name not in header]
            if missing:
                raise TraceError(
                    f"{path}:1: header lacks column(s) {', '.join(missing)}; "
                    f"expected {','.join(TIRESIAS_COLUMNS)}"
                )
            reader.fieldnames = header
            jobs = [_parse_row(row, f"{path}:{reader.line_num}") for row in reader]
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a text file ({exc.reason})") from None
    if not jobs:
        raise TraceError(f"{path}: the trace has no jobs")
    seen: set[int] = set()
    for job in jobs:
        if job.id in seen:
            raise TraceError(f"{path}: job_id {job.id} appears twice")
        seen.add(job.id)
    return sorted(jobs, key=lambda job: (job.submit_time, job.id))


def _parse_row(row: dict[str, str], where: str) -> TraceJob:
    if None in row:  # DictReader puts surplus cells under the key None
        raise TraceError(f"{where}: more cells than header columns")
    consolidation_raw = (row.get("consolidation") or "").strip()
    try:
        consolidation = (
            Consolidation(consolidation_raw) if consolidation_raw else Consolidation.PREFERRED
        )
    except ValueError:
        raise TraceError(
            f"{where}: field 'consolidation' must be required, preferred or any, "
            f"got {consolidation_raw!r}"
        ) from None
    iterations_raw = (row.get("iterations") or "").strip()
    return TraceJob(
        id=_int_field(row, "job_id", where, minimum=0),
        num_gpus=_int_field(row, "num_gpu", where, minimum=1),
        submit_time=_float_field(row, "submit_time", where, positive=False),
        duration=_float_field(row, "duration", where, positive=True),
        model=(row.get("model_name") or "").strip(),
        iterations=_int_field(row, "iterations", where, minimum=0) if iterations_raw else 0,
        user=(row.get("user") or "").strip() or "default",
        group=(row.get("group") or "").strip() or None,
        consolidation=consolidation,
    )


def scale_durations(jobs: Iterable[TraceJob], factor: float) -> list[TraceJob]:
    """The same trace with every duration multiplied by `factor` (e.g. 60_job × 10)."""
    if factor <= 0:
        raise ValueError("duration factor must be > 0")
    return [replace(job, duration=job.duration * factor) for job in jobs]


def write_tiresias_trace(jobs: Sequence[TraceJob], path: str | Path) -> None:
    """Write jobs in the Tiresias format (plus user/group columns when any job has them)."""
    with_owner = any(job.user != "default" or job.group for job in jobs)
    columns = list(TIRESIAS_COLUMNS) + (["user", "group"] if with_owner else [])
    ordered = sorted(jobs, key=lambda job: (job.submit_time, job.id))
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for index, job in enumerate(ordered):
            nxt = ordered[index + 1].submit_time if index + 1 < len(ordered) else job.submit_time
            row: list[object] = [
                job.id,
                job.num_gpus,
                _compact(job.submit_time),
                job.iterations,
                job.model,
                _compact(job.duration),
                _compact(nxt - job.submit_time),
            ]
            if with_owner:
                row += [job.user, job.group or ""]
            writer.writerow(row)


def _compact(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(value, 6))
