"""Cluster specs: Tiresias CSV (file or inline) and the heterogeneous JSON description."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.sim.clusters import load_cluster, parse_tiresias_spec
from scheduler.sim.traces import TraceError

SHARED = Path(__file__).resolve().parents[4] / "shared" / "traces" / "tiresias"


def test_an_inline_spec_row_builds_switches_nodes_and_gpus() -> None:
    cluster = load_cluster("1,2,4,128,256")
    assert cluster.num_gpus == 8
    assert [n.name for n in cluster.nodes] == ["s0n0", "s0n1"]
    assert [d.node for d in cluster.devices] == ["s0n0"] * 4 + ["s0n1"] * 4
    assert not cluster.heterogeneous


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/traces not present")
@pytest.mark.parametrize(("name", "gpus"), [("cluster_spec.csv", 64), ("n32g4.csv", 128)])
def test_it_reads_the_shipped_spec_files_without_trailing_newline(name: str, gpus: int) -> None:
    assert load_cluster(SHARED / name).num_gpus == gpus


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,x,1,1",
            "spec:2: field 'num_gpu_p_node' must be a positive integer, got 'x'",
        ),
        (
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,0,4,1,1",
            "spec:2: field 'num_node_p_switch' must be a positive integer, got '0'",
        ),
        ("num_switch,num_gpu_p_node\n1,4", "spec:1: header lacks column"),
        (
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,1,1,1,1\n"
            "1,1,1,1,1",
            "exactly one data row, found 2",
        ),
        ("1,2,4,128,256,9", "spec:1: more cells than the spec's five columns"),
        ("100000,100000,8,1,1", "spec: 80000000000 GPUs; the simulator takes at most 1000000"),
    ],
)
def test_bad_specs_name_the_field(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_tiresias_spec(text, where="spec")


def test_the_heterogeneous_description_has_types_speeds_and_throughputs(tmp_path: Path) -> None:
    path = tmp_path / "hetero.json"
    path.write_text(
        json.dumps(
            {
                "device_types": {"v100": {"speed": 1.0}, "k80": {"speed": 0.25}},
                "nodes": [
                    {"name": "v-{i}", "count": 2, "device_type": "v100", "gpus": 4},
                    {"name": "k", "device_type": "k80", "gpus": 8, "speed": 0.3},
                ],
                "throughputs": {"resnet50": {"v100": 1.0, "k80": 0.14}},
            }
        )
    )
    cluster = load_cluster(path)
    assert cluster.num_gpus == 16
    assert [n.name for n in cluster.nodes] == ["v-0", "v-1", "k"]
    assert cluster.device_types == ("k80", "v100")
    assert {d.speed for d in cluster.devices if d.device_type == "k80"} == {0.3}
    assert dict(cluster.throughputs["resnet50"]) == {"k80": 0.14, "v100": 1.0}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"nodes": []}, "'nodes' must be a non-empty list"),
        ({"nodes": [{"device_type": "v100", "gpus": 0}]}, r"nodes\[0\].gpus must be a positive"),
        ({"nodes": [{"gpus": 2}]}, r"nodes\[0\].device_type must be a non-empty string"),
        ({"nodes": [{"name": "a", "device_type": "v", "gpus": 1}] * 2}, "used twice"),
        (
            {"device_types": {"v": {"speed": -1}}, "nodes": [{"device_type": "v", "gpus": 1}]},
            r"device_types.v.speed must be a finite number >= 0",
        ),
        (
            {"nodes": [{"device_type": "v", "gpus": 1}], "throughputs": {"m": {"v": "fast"}}},
            r"throughputs.m.v must be a number",
        ),
        # Typos are errors: each of these once ran with silently different speeds.
        (
            {"nodes": [{"device_type": "v", "gpus": 1}], "throughput": {"m": {"v": 0.1}}},
            r"unknown key\(s\) 'throughput'",
        ),
        (
            {"nodes": [{"device_type": "v", "gpus": 1}], "throughputs": {"m": {"V": 0.1}}},
            r"throughputs.m.V: the cluster has no device type 'V'",
        ),
        (
            {"device_types": {"v100": 1.0}, "nodes": [{"device_type": "v1OO", "gpus": 1}]},
            r"nodes\[0\].device_type 'v1OO' is not in device_types \(v100\)",
        ),
        ({"nodes": [{"device_type": "v", "gpus": 1, "cuont": 4}]}, r"unknown key\(s\) 'cuont'"),
        ({"nodes": [{"device_type": "v", "gpus": 1, "count": True}]}, r"count must be a positive"),
        (
            {"device_types": {"v": {"sped": 2}}, "nodes": [{"device_type": "v", "gpus": 1}]},
            r"device_types.v: unknown key\(s\) 'sped'",
        ),
        (
            {"nodes": [{"device_type": "v", "gpus": 1}], "throughputs": {"m": {"v": 0}}},
            r"throughputs.m is 0 on every device type",
        ),
        (
            {"nodes": [{"device_type": "v", "gpus": 8, "count": 200_000}]},
            r"more than 1000000 GPUs",
        ),
    ],
)
def test_bad_heterogeneous_descriptions_say_where(
    tmp_path: Path, data: object, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TraceError, match=message):
        load_cluster(path)


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "nodes": [\n}')
    with pytest.raises(TraceError, match=r"bad.json:3: invalid JSON"):
        load_cluster(path)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("1,1,-2,1,1", "--cluster '1,1,-2,1,1':1: field 'num_gpu_p_node' must be a positive"),
        ("1,1,2", "--cluster '1,1,2':1: fewer cells than the spec's five columns (no "),
        ("1,1,x,1,1", "field 'num_gpu_p_node' must be a positive integer, got 'x'"),
        ("no,such.csv", "no,such.csv: cannot read cluster file"),
    ],
)
def test_a_bad_inline_spec_names_its_field_instead_of_a_missing_file(
    spec: str, message: str
) -> None:
    with pytest.raises(TraceError) as error:
        load_cluster(spec)
    assert message in str(error.value)
