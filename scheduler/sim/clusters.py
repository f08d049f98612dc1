"""Simulated clusters: Tiresias cluster specs and gpulab's heterogeneous description.

Two formats are read:

1. **Tiresias spec** (CSV, one data row)::

       num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node
       1,2,4,128,256

   gives ``num_switch × num_node_p_switch`` nodes of ``num_gpu_p_node`` GPUs of one type
   (``gpu``, speed 1.0). CPUs and memory are read and checked but do not limit jobs (the
   reference's ``count`` placement ignores them too). An inline ``"1,2,4,128,256"`` works
   as well as a file.

2. **Heterogeneous description** (JSON; documented in bench/README.md)::

       {
         "device_types": {"v100": {"speed": 1.0}, "p100": {"speed": 0.6}, "k80": {"speed": 0.2}},
         "nodes": [
           {"name": "v100-{i}", "count": 12, "device_type": "v100", "gpus": 8},
           {"name": "p100-{i}", "count": 12, "device_type": "p100", "gpus": 8}
         ],
         "throughputs": {"resnet50": {"v100": 1.0, "p100": 0.6, "k80": 0.14}}
       }

   ``name`` may contain ``{i}`` (0-based index within the entry); ``count`` defaults to 1;
   ``speed`` is the admin-set relative speed (attained service is normalized by it);
   the optional ``throughputs`` matrix gives, per model name, the job's throughput on each
   type relative to the reference 1.0 (what the engine uses to advance a job's work). A
   model or type missing from the matrix runs at the device type's speed; a throughput of
   0 means the model does not run on that type. Unknown keys, node types missing from a
   non-empty ``device_types`` and matrix types the cluster lacks are errors: a typo would
   otherwise change the results silently.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.core.types import Device, Node
from scheduler.sim.traces import TraceError

# A sanity bound: a typo such as 100000,100000,8 would otherwise build 8·10^10 devices.
MAX_DEVICES = 1_000_000
HETEROGENEOUS_KEYS = frozenset({"name", "device_types", "nodes", "throughputs"})
NODE_KEYS = frozenset({"name", "count", "device_type", "gpus", "speed"})

TIRESIAS_SPEC_COLUMNS = (
    "num_switch",
    "num_node_p_switch",
    "num_gpu_p_node",
    "num_cpu_p_node",
    "mem_p_node",
)


@dataclass(frozen=True)
class SimCluster:
    """Devices and nodes of a simulated cluster, plus optional per-model throughputs."""

    devices: tuple[Device, ...]
    nodes: tuple[Node, ...]
    name: str = ""
    # model -> ((device_type, throughput relative to reference 1.0), ...)
    throughputs: Mapping[str, tuple[tuple[str, float], ...]] = field(default_factory=dict)

    @property
    def num_gpus(self) -> int:
        return len(self.devices)

    @property
    def device_types(self) -> tuple[str, ...]:
        return tuple(sorted({device.device_type for device in self.devices}))

    @property
    def heterogeneous(self) -> bool:
        return len(self.device_types) > 1

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for device in self.devices:
            counts[device.device_type] = counts.get(device.device_type, 0) + 1
        mix = ", ".join(f"{n} × {t}" for t, n in sorted(counts.items()))
        return f"{len(self.nodes)} nodes, {self.num_gpus} GPUs ({mix})"


def homogeneous_cluster(
    num_nodes: int, gpus_per_node: int, *, device_type: str = "gpu", name: str = ""
) -> SimCluster:
    """`num_nodes` nodes of `gpus_per_node` devices of one type, speed 1.0."""
    devices: list[Device] = []
    nodes: list[Node] = []
    for n in range(num_nodes):
        node = f"n{n}"
        nodes.append(Node(name=node))
        devices.extend(
            Device(id=len(devices), node=node, device_type=device_type)
            for _ in range(gpus_per_node)
        )
    return SimCluster(
        devices=tuple(devices), nodes=tuple(nodes), name=name or f"{num_nodes}x{gpus_per_node}"
    )


def parse_tiresias_spec(text: str, where: str = "<spec>") -> SimCluster:
    """Parse a Tiresias cluster spec (header + one row, or the bare row)."""
    lines = [line for line in text.replace("\r", "").split("\n") if line.strip()]
    if not lines:
        raise TraceError(f"{where}: empty cluster spec")
    if lines[0].split(",")[0].strip() == "num_switch":
        header = [cell.strip() for cell in lines[0].split(",")]
        missing = [c for c in TIRESIAS_SPEC_COLUMNS if c not in header]
        if missing:
            raise TraceError(f"{where}:1: header lacks column(s) {', '.join(missing)}")
        rows = list(csv.DictReader(io.StringIO("\n".join(lines)), fieldnames=header))[1:]
        first_line = 2
    else:
        header = list(TIRESIAS_SPEC_COLUMNS)
        rows = list(csv.DictReader(io.StringIO("\n".join(lines)), fieldnames=header))
        first_line = 1
    if len(rows) != 1:
        raise TraceError(f"{where}: a cluster spec has exactly one data row, found {len(rows)}")
    row = rows[0]
    if None in row:  # DictReader puts surplus cells under the key None
        raise TraceError(f"{where}:{first_line}: more cells than the spec's five columns")
    missing = [column for column in TIRESIAS_SPEC_COLUMNS if row.get(column) is None]
    if missing:  # ... and leaves absent ones None
        raise TraceError(
            f"{where}:{first_line}: fewer cells than the spec's five columns "
            f"(no {', '.join(missing)})"
        )
    values: dict[str, int] = {}
    for column in TIRESIAS_SPEC_COLUMNS:
        raw = (row.get(column) or "").strip()
        if not re.fullmatch(r"\d+", raw) or int(raw) < 1:
            raise TraceError(
                f"{where}:{first_line}: field '{column}' must be a positive integer, got {raw!r}"
            )
        values[column] = int(raw)
    total = values["num_switch"] * values["num_node_p_switch"] * values["num_gpu_p_node"]
    if total > MAX_DEVICES:
        raise TraceError(f"{where}: {total} GPUs; the simulator takes at most {MAX_DEVICES}")
    return _tiresias_cluster(values)


def _tiresias_cluster(spec: Mapping[str, int]) -> SimCluster:
    devices: list[Device] = []
    nodes: list[Node] = []
    # Node names keep the reference's switch/node hierarchy visible in logs.
    for s in range(spec["num_switch"]):
        for n in range(spec["num_node_p_switch"]):
            node = f"s{s}n{n}"
            nodes.append(Node(name=node))
            for _ in range(spec["num_gpu_p_node"]):
                devices.append(Device(id=len(devices), node=node, device_type="gpu"))
    name = ",".join(str(spec[c]) for c in TIRESIAS_SPEC_COLUMNS)
    return SimCluster(devices=tuple(devices), nodes=tuple(nodes), name=name)


def parse_heterogeneous(data: object, where: str = "<cluster>") -> SimCluster:
    """Build a cluster from the JSON description (already decoded)."""
    if not isinstance(data, dict):
        raise TraceError(f"{where}: the cluster description must be a JSON object")
    _no_unknown_keys(data, HETEROGENEOUS_KEYS, where)
    types = data.get("device_types", {})
    if not isinstance(types, dict):
        raise TraceError(f"{where}: 'device_types' must be an object of type -> {{speed}}")
    speeds: dict[str, float] = {}
    for type_name, spec in types.items():
        if isinstance(spec, dict):
            _no_unknown_keys(spec, frozenset({"speed"}), f"{where}: device_types.{type_name}")
            speed = spec.get("speed", 1.0)
        else:
            speed = spec
        speeds[type_name] = _positive(speed, f"{where}: device_types.{type_name}.speed")
    entries = data.get("nodes")
    if not isinstance(entries, list) or not entries:
        raise TraceError(f"{where}: 'nodes' must be a non-empty list")
    devices: list[Device] = []
    nodes: list[Node] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        at = f"{where}: nodes[{index}]"
        if not isinstance(entry, dict):
            raise TraceError(f"{at} must be an object")
        _no_unknown_keys(entry, NODE_KEYS, at)
        device_type = entry.get("device_type")
        if not isinstance(device_type, str) or not device_type:
            raise TraceError(f"{at}.device_type must be a non-empty string")
        if speeds and device_type not in speeds:
            declared = ", ".join(sorted(speeds))
            raise TraceError(
                f"{at}.device_type {device_type!r} is not in device_types ({declared})"
            )
        count = entry.get("count", 1)
        gpus = entry.get("gpus")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TraceError(f"{at}.count must be a positive integer, got {count!r}")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise TraceError(f"{at}.gpus must be a positive integer, got {gpus!r}")
        if len(devices) + count * gpus > MAX_DEVICES:
            raise TraceError(f"{where}: more than {MAX_DEVICES} GPUs in all")
        speed = speeds.get(device_type)
        if "speed" in entry:
            speed = _positive(entry["speed"], f"{at}.speed")
        if speed is None:
            speed = 1.0
        pattern = str(entry.get("name", f"{device_type}-{{i}}"))
        for i in range(count):
            if "{i}" in pattern:
                node = pattern.replace("{i}", str(i))
            else:
                node = pattern if count == 1 else f"{pattern}-{i}"
            if node in names:
                raise TraceError(f"{at}: node name {node!r} is used twice")
            names.add(node)
            nodes.append(Node(name=node))
            devices.extend(
                Device(id=len(devices), node=node, device_type=device_type, speed=speed)
                for _ in range(gpus)
            )
    throughputs = parse_throughput_matrix(data.get("throughputs", {}), f"{where}: throughputs")
    # A matrix may cover declared types the cluster has no node of (measurements are kept
    # for every type), but not a name declared nowhere: that is a typo.
    cluster_types = {device.device_type for device in devices}
    known_types = cluster_types | set(speeds)
    for model, row in throughputs.items():
        for type_name, _ in row:
            if type_name not in known_types:
                raise TraceError(
                    f"{where}: throughputs.{model}.{type_name}: the cluster has no device type "
                    f"{type_name!r} ({', '.join(sorted(known_types))})"
                )
        values = dict(row)
        if all(values.get(type_name, 1.0) == 0 for type_name in cluster_types):
            raise TraceError(f"{where}: throughputs.{model} is 0 on every device type")
    return SimCluster(
        devices=tuple(devices),
        nodes=tuple(nodes),
        name=str(data.get("name", where)),
        throughputs=throughputs,
    )


def parse_throughput_matrix(
    data: object, where: str = "<throughputs>"
) -> dict[str, tuple[tuple[str, float], ...]]:
    """`{model: {device_type: relative throughput}}` -> model -> sorted (type, value) pairs."""
    if not isinstance(data, dict):
        raise TraceError(f"{where} must be an object of model -> {{device_type: throughput}}")
    matrix: dict[str, tuple[tuple[str, float], ...]] = {}
    for model, row in data.items():
        if not isinstance(row, dict) or not row:
            raise TraceError(f"{where}.{model} must be a non-empty object of type -> throughput")
        matrix[str(model)] = tuple(
            sorted((str(t), _non_negative(v, f"{where}.{model}.{t}")) for t, v in row.items())
        )
    return matrix


def _no_unknown_keys(data: Mapping[str, object], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise TraceError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"expected {', '.join(sorted(known))}"
        )


def _positive(value: object, where: str) -> float:
    number = _non_negative(value, where)
    if number == 0:
        raise TraceError(f"{where} must be > 0")
    return number


def _non_negative(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{where} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise TraceError(f"{where} must be a finite number >= 0, got {value!r}")
    return number


def _looks_inline(text: str) -> bool:
    """Comma-separated cells on one line, not a path (no separator, no .csv/.json name)."""
    return (
        "," in text
        and not any(sep in text for sep in ("/", "\\", "\n"))
        and Path(text).suffix.lower() not in {".csv", ".json"}
    )


def load_cluster(spec: str | Path) -> SimCluster:
    """Load a cluster from a Tiresias spec file, an inline spec row, or a JSON description.

    `spec` is a path ending in .json (heterogeneous), a path to a CSV spec, or an inline
    row such as ``"1,2,4,128,256"``.
    """
    text_spec = str(spec)
    path = Path(text_spec)
    if not path.exists() and _looks_inline(text_spec):
        # Not a file and shaped like a row: read it as the inline spec it was meant to be,
        # so a bad field ("1,1,-2,1,1", "1,1,2") is named instead of "no such file".
        return parse_tiresias_spec(text_spec, where=f"--cluster {text_spec!r}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read cluster file: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        return parse_heterogeneous(data, where=str(path))
    return parse_tiresias_spec(text, where=str(path))
