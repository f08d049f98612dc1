"""The Philly-like generator (seeded, shaped as documented) and the metric definitions."""

from __future__ import annotations

import math

import pytest

from scheduler.sim.generators import load_gpu_times, philly_like
from scheduler.sim.metrics import jain_index, percentile
from scheduler.sim.traces import TraceError

SAMPLES = [121.0, 500.0, 2000.0, 9000.0, 80000.0]


def test_the_generator_is_seeded_and_respects_the_cluster() -> None:
    first = philly_like(300, 8, load=1.5, seed=3, gpu_times=SAMPLES)
    assert first == philly_like(300, 8, load=1.5, seed=3, gpu_times=SAMPLES)
    assert first != philly_like(300, 8, load=1.5, seed=4, gpu_times=SAMPLES)
    assert {j.num_gpus for j in first} <= {1, 2, 4, 8}  # 16-GPU jobs cannot fit on 8
    assert [j.submit_time for j in first] == sorted(j.submit_time for j in first)
    # duration = GPU-time / GPUs, rounded to whole seconds
    assert all(any(abs(j.duration * j.num_gpus - s) <= j.num_gpus for s in SAMPLES) for j in first)
    assert len({j.user for j in first}) > 1


def test_higher_load_means_denser_arrivals() -> None:
    light = philly_like(500, 64, load=0.5, seed=1, gpu_times=SAMPLES)
    heavy = philly_like(500, 64, load=2.0, seed=1, gpu_times=SAMPLES)
    assert heavy[-1].submit_time == pytest.approx(light[-1].submit_time / 4, rel=0.01)


def test_bad_gpu_time_files_name_the_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "gput.csv"
    path.write_text("duration\n121\nabc\n")
    with pytest.raises(TraceError, match=r"gput.csv:3: field 'duration' is not a number"):
        load_gpu_times(path)


def test_percentiles_interpolate_and_jain_is_one_for_equal_values() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert math.isnan(percentile([], 50))
    assert jain_index([2, 2, 2]) == 1
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)


def test_the_default_gpu_times_ship_with_the_repository() -> None:
    """The Philly-like generator (benches, `--generate philly`) runs on a bare clone."""
    from scheduler.sim.generators import DEFAULT_GPUT, REPO_ROOT

    assert DEFAULT_GPUT.is_relative_to(REPO_ROOT)
    assert len(load_gpu_times()) == 5000
