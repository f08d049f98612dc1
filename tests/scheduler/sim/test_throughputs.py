"""Gavel throughput table and Gavel's cluster description (no Django)."""

from __future__ import annotations

import json

import pytest

from scheduler.sim.gavel import JOB_TABLE
from scheduler.sim.throughputs import (
    REPO_THROUGHPUTS,
    SHARED_THROUGHPUTS,
    gavel_cluster,
    gavel_cluster_spec,
    load_throughputs,
    resolve_throughputs_path,
)


@pytest.fixture(scope="module")
def table():
    return load_throughputs()


def test_the_in_repo_copy_is_found_first() -> None:
    assert resolve_throughputs_path() == REPO_THROUGHPUTS


def test_the_table_has_gavels_26_single_gpu_job_types_on_three_types(table) -> None:
    assert table.worker_types == ("k80", "p100", "v100")
    assert {model for model, _ in table.job_keys(scale_factor=1)} == {m for m, _ in JOB_TABLE}
    # 26 at scale 1, 19 distributed-capable types at 2, 4 and 8.
    assert len(table.job_keys()) == 26 + 3 * 19


@pytest.mark.parametrize(
    ("model", "worker_type", "steps_per_second"),
    [
        ("ResNet-50 (batch size 64)", "v100", 4.395),
        ("ResNet-18 (batch size 256)", "k80", 0.886),
        ("CycleGAN", "p100", 2.403),
        ("Recommendation (batch size 512)", "k80", 32.859),
    ],
)
def test_isolated_throughputs_match_gavels_published_values(
    table, model: str, worker_type: str, steps_per_second: float
) -> None:
    assert table.get(worker_type, model) == pytest.approx(steps_per_second, abs=1e-3)


@pytest.mark.skipif(not SHARED_THROUGHPUTS.exists(), reason="../shared is not mounted")
def test_the_in_repo_copy_equals_the_isolated_values_of_the_shared_file(table) -> None:
    shared = load_throughputs(SHARED_THROUGHPUTS)
    assert shared.steps_per_second == table.steps_per_second
    raw = json.loads(SHARED_THROUGHPUTS.read_text())
    assert "v100_unconsolidated" in raw  # dropped on load: consolidation is modelled apart


@pytest.mark.parametrize(
    ("model", "scale_factor", "expected"),
    [
        # Relative to the V100; Recommendation is faster on the older GPUs in this data.
        ("Recommendation (batch size 512)", 1, {"v100": 1.0, "p100": 2.096, "k80": 1.409}),
        ("CycleGAN", 1, {"v100": 1.0, "p100": 0.543, "k80": 0.114}),
        # Gavel stores 0.0 where a job cannot run: the type is left out.
        ("ResNet-50 (batch size 128)", 2, {"v100": 1.0, "p100": pytest.approx(0.6, abs=0.1)}),
    ],
)
def test_relative_speeds_are_what_job_throughputs_carry(
    table, model: str, scale_factor: int, expected: dict[str, float]
) -> None:
    relative = dict(table.relative(model, scale_factor))
    assert relative.keys() == expected.keys()
    for worker_type, value in expected.items():
        assert relative[worker_type] == pytest.approx(value, abs=1e-3)


def test_gavels_cluster_has_36_single_gpu_servers_of_each_type(table) -> None:
    cluster = gavel_cluster(table=table)
    assert cluster.num_gpus == 108
    assert len(cluster.nodes) == 108
    counts: dict[str, int] = {}
    for device in cluster.devices:
        counts[device.device_type] = counts.get(device.device_type, 0) + 1
    assert counts == {"v100": 36, "p100": 36, "k80": 36}
    speeds = {d.device_type: d.speed for d in cluster.devices}
    assert speeds["v100"] == 1.0
    assert speeds["k80"] < speeds["p100"] < speeds["v100"]
    assert dict(cluster.throughputs["A3C"])["k80"] == pytest.approx(0.479, abs=1e-3)


def test_gavel_cluster_spec_is_plain_json_with_multi_gpu_servers(table) -> None:
    spec = gavel_cluster_spec({"v100": 10, "p100": 0, "k80": 4}, gpus_per_node=4, table=table)
    text = json.dumps(spec)  # serializable as a cluster file
    cluster = gavel_cluster({"v100": 10, "p100": 0, "k80": 4}, gpus_per_node=4, table=table)
    assert json.loads(text)["nodes"][0]["count"] == 2
    assert [len([d for d in cluster.devices if d.node == n.name]) for n in cluster.nodes] == [
        4,
        4,
        2,
        4,
    ]
