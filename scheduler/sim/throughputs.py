"""Gavel's measured throughputs and heterogeneous cluster files.

Gavel (Narayanan et al., OSDI'20) measured the training throughput (steps per second) of 26 job
types on V100, P100 and K80 GPUs; its simulator turns a job's duration into a step count on the
reference type (`num_steps = duration_s * throughput[v100][job]`) and a job then needs
`num_steps / throughput[w][job]` seconds on worker type w. That is exactly the "processing time
of job j on device type t" that AlloX needs (algorithms.md §3), so gpulab loads the same table.

Throughput file (Gavel's own layout, MIT-licensed data from `stanford-futuredata/gavel`,
`scheduler/simulation_throughputs.json`)::

    { worker_type: { "('<model> (batch size B)', <scale_factor>)": { "null": <steps/s>, ... } } }

Only the isolated (`"null"`) entries matter to gpulab (no GPU sharing yet); the co-location
pairs are dropped from the in-repo copy `scheduler/data/gavel_simulation_throughputs.json`
(36 KB instead of 1.2 MB) so the code runs without `../shared`. `resolve_throughputs_path`
prefers an explicit path, then the in-repo copy, then `<repo>/../shared/traces/gavel/`.

Heterogeneous clusters use the simulator's JSON description (`scheduler.sim.clusters`,
`load_cluster`); `gavel_cluster_spec` writes Gavel's cluster in it::

    {
      "device_types": {"v100": {"speed": 1.0}, "p100": {"speed": 0.943}, "k80": {"speed": 0.297}},
      "nodes": [{"name": "v100-{i}", "count": 36, "device_type": "v100", "gpus": 1}, ...],
      "throughputs": {"A3C": {"v100": 1.0, "p100": 0.792, "k80": 0.479}, ...}
    }

`speed` is the admin-set relative speed of a type (`Device.speed`, 1.0 = reference; a node entry
may override it); `throughputs` is the model -> device type -> speed relative to the reference
matrix (what `Job.throughputs` carries and what the engine advances work with); a model or type
missing from it falls back to the device's `speed`.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler.sim.clusters import SimCluster, parse_heterogeneous

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO_THROUGHPUTS = REPO_ROOT / "scheduler" / "data" / "gavel_simulation_throughputs.json"
SHARED_THROUGHPUTS = (
    REPO_ROOT.parent / "shared" / "traces" / "gavel" / "simulation_throughputs.json"
)

GAVEL_WORKER_TYPES: tuple[str, ...] = ("v100", "p100", "k80")
REFERENCE_TYPE = "v100"

JobKey = tuple[str, int]  # (model, scale factor), Gavel's job-type key


def resolve_throughputs_path(path: str | Path | None = None) -> Path:
    """The throughput file to read: `path`, else the in-repo copy, else ../shared."""
    if path is not None:
        return Path(path)
    for candidate in (REPO_THROUGHPUTS, SHARED_THROUGHPUTS):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(
        f"no Gavel throughput file at {REPO_THROUGHPUTS} or {SHARED_THROUGHPUTS}"
    )


def _parse_key(raw: str) -> JobKey:
    # Keys are Python tuples written as strings: "('ResNet-50 (batch size 64)', 1)".
    model, scale_factor = ast.literal_eval(raw)
    return str(model), int(scale_factor)


@dataclass(frozen=True)
class ThroughputTable:
    """Isolated steps/s per (worker type, job key); Gavel's oracle throughputs."""

    steps_per_second: Mapping[str, Mapping[JobKey, float]]

    @property
    def worker_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.steps_per_second))

    def job_keys(self, scale_factor: int | None = None) -> tuple[JobKey, ...]:
        keys = self.steps_per_second[REFERENCE_TYPE]
        return tuple(sorted(key for key in keys if scale_factor is None or key[1] == scale_factor))

    def get(self, worker_type: str, model: str, scale_factor: int = 1) -> float:
        return self.steps_per_second[worker_type][(model, scale_factor)]

    def relative(
        self,
        model: str,
        scale_factor: int = 1,
        worker_types: Iterable[str] = GAVEL_WORKER_TYPES,
        reference: str = REFERENCE_TYPE,
    ) -> tuple[tuple[str, float], ...]:
        """Speed of `model` on each type relative to `reference`: `Job.throughputs`' shape.

        A type the job cannot run on (Gavel stores 0.0) is left out, so AlloX never picks it.
        """
        base = self.get(reference, model, scale_factor)
        pairs = []
        for worker_type in worker_types:
            value = self.get(worker_type, model, scale_factor)
            if value > 0.0:
                pairs.append((worker_type, value / base))
        return tuple(pairs)

    def mean_relative_speed(self, worker_type: str, scale_factor: int = 1) -> float:
        """Geometric mean over job types of speed relative to the reference type.

        Used as the admin-set `Device.speed` of a type (what a heterogeneity-blind scheduler
        believes), and for normalizing attained service.
        """
        logs = []
        for model, factor in self.job_keys(scale_factor):
            value = self.get(worker_type, model, factor)
            if value > 0.0:
                logs.append(math.log(value / self.get(REFERENCE_TYPE, model, factor)))
        return math.exp(sum(logs) / len(logs))


def load_throughputs(path: str | Path | None = None) -> ThroughputTable:
    """Read Gavel's throughput JSON (full or in-repo reduced copy), isolated values only."""
    with resolve_throughputs_path(path).open() as handle:
        raw = json.load(handle)
    table: dict[str, dict[JobKey, float]] = {}
    for worker_type, jobs in raw.items():
        if worker_type.endswith("_unconsolidated"):
            # Equal to the consolidated values at scale factor 1; gpulab models spreading
            # through Consolidation instead.
            continue
        table[worker_type] = {_parse_key(key): float(entry["null"]) for key, entry in jobs.items()}
    return ThroughputTable(steps_per_second=table)


def gavel_cluster_spec(
    counts: Mapping[str, int] | None = None,
    gpus_per_node: int = 1,
    table: ThroughputTable | None = None,
) -> dict[str, object]:
    """Gavel's simulated cluster as a cluster description [36 V100 + 36 P100 + 36 K80].

    One GPU per server, as in Gavel's `--num_gpus_per_server 1:1:1`. Device speeds are the
    geometric-mean relative speeds of the 26 single-GPU job types (what an admin would set
    without per-model knowledge, and what attained service is normalized by); the per-model
    `throughputs` matrix carries the measured ratios the engine advances work with and that
    AlloX reads through `Job.throughputs`.
    """
    table = table or load_throughputs()
    counts = counts or {"v100": 36, "p100": 36, "k80": 36}
    device_types = {
        worker_type: {"speed": round(table.mean_relative_speed(worker_type), 4)}
        for worker_type in GAVEL_WORKER_TYPES
    }
    nodes = []
    for worker_type in GAVEL_WORKER_TYPES:
        total = counts.get(worker_type, 0)
        full, rest = divmod(total, gpus_per_node)
        if full:
            nodes.append(
                {
                    "name": f"{worker_type}-{{i}}",
                    "count": full,
                    "device_type": worker_type,
                    "gpus": gpus_per_node,
                }
            )
        if rest:
            nodes.append(
                {"name": f"{worker_type}-{full}", "device_type": worker_type, "gpus": rest}
            )
    matrix = {
        model: dict(table.relative(model, factor))
        for model, factor in table.job_keys(scale_factor=1)
    }
    return {
        "name": "gavel-" + "-".join(f"{counts.get(t, 0)}{t}" for t in GAVEL_WORKER_TYPES),
        "device_types": device_types,
        "nodes": nodes,
        "throughputs": matrix,
    }


def gavel_cluster(
    counts: Mapping[str, int] | None = None,
    gpus_per_node: int = 1,
    table: ThroughputTable | None = None,
) -> SimCluster:
    """`gavel_cluster_spec` parsed by the simulator's cluster loader."""
    return parse_heterogeneous(gavel_cluster_spec(counts, gpus_per_node, table), where="gavel")
