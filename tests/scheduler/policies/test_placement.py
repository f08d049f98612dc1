"""Placers: consolidation, best fit, type preference, all or nothing (no Django)."""

from __future__ import annotations

import pytest

from scheduler.core.types import Consolidation, PlacementKind
from scheduler.policies.placement import PLACERS, best_fit_place, choose_pools, gpu_count_place
from tests.scheduler.builders import ANY, PREFERRED, REQUIRED, devices, nodes_of, pending, snapshot


@pytest.mark.parametrize(
    ("free", "gpus", "consolidation", "expected"),
    [
        # Best fit: the node left with the fewest free devices.
        ({"a": {"n1": 8, "n2": 3, "n3": 5}}, 3, REQUIRED, ("a", (("n2", 3),))),
        ({"a": {"n1": 8, "n2": 3, "n3": 5}}, 4, PREFERRED, ("a", (("n3", 4),))),
        # Ties broken by node name.
        ({"a": {"n2": 4, "n1": 4}}, 4, REQUIRED, ("a", (("n1", 4),))),
        # Required never spans nodes: 6 free in total but no node holds 4.
        ({"a": {"n1": 3, "n2": 3}}, 4, REQUIRED, None),
        # Preferred spreads over the fewest nodes: the biggest block, then the tightest rest.
        ({"a": {"n1": 3, "n2": 2, "n3": 1, "n4": 2}}, 5, PREFERRED, ("a", (("n1", 3), ("n2", 2)))),
        # Any fills the smallest fragments first and keeps whole nodes free.
        ({"a": {"n1": 8, "n2": 1, "n3": 2}}, 3, ANY, ("a", (("n2", 1), ("n3", 2)))),
        # Not enough devices at all.
        ({"a": {"n1": 2}}, 3, ANY, None),
    ],
)
def test_choose_pools_places_on_counts_by_consolidation_and_best_fit(
    free: dict[str, dict[str, int]],
    gpus: int,
    consolidation: Consolidation,
    expected: object,
) -> None:
    assert choose_pools(gpus, ["a"], consolidation, free) == expected


def test_choose_pools_takes_the_first_accepted_type_that_fits() -> None:
    free = {"a100": {"n1": 2}, "v100": {"n2": 4}, "k80": {"n3": 8}}
    assert choose_pools(4, ["a100", "v100", "k80"], REQUIRED, free) == ("v100", (("n2", 4),))
    assert choose_pools(2, ["a100", "v100"], REQUIRED, free) == ("a100", (("n1", 2),))


@pytest.mark.parametrize(
    ("job_fields", "expected_nodes", "expected_count"),
    [
        ({"consolidation": REQUIRED}, {"n2"}, 4),  # n2 has exactly 4 free: best fit
        ({"consolidation": PREFERRED}, {"n2"}, 4),
        ({"accepted_types": ("v100",)}, {"n3"}, 4),
    ],
)
def test_best_fit_place_gives_devices_on_the_tightest_node_of_an_accepted_type(
    job_fields: dict[str, object], expected_nodes: set[str], expected_count: int
) -> None:
    devs = devices({"n1": ("a100", 8), "n2": ("a100", 4), "n3": ("v100", 8)})
    snap = snapshot([], devs)
    job = pending(1, 4, **job_fields)
    placed = best_fit_place([job], devs, snap)
    assert len(placed[1]) == expected_count
    assert nodes_of(snap, placed[1]) == expected_nodes


def test_best_fit_place_omits_jobs_it_cannot_place_and_never_half_places() -> None:
    devs = devices({"n1": ("a100", 4), "n2": ("a100", 4)})
    snap = snapshot([], devs)
    jobs = [pending(1, 6, consolidation=REQUIRED), pending(2, 6), pending(3, 4)]
    placed = best_fit_place(jobs, devs, snap)
    assert 1 not in placed
    assert len(placed[2]) == 6
    assert 3 not in placed  # only 2 devices left after job 2


def test_best_fit_place_prefers_faster_types_for_jobs_that_accept_any_type() -> None:
    devs = devices({"n1": ("v100", 4), "n2": ("a100", 4)}, speed={"a100": 2.0, "v100": 1.0})
    snap = snapshot([], devs)
    placed = best_fit_place([pending(1, 2)], devs, snap)
    assert nodes_of(snap, placed[1]) == {"n2"}


def test_gpu_count_place_takes_the_lowest_ids_across_nodes() -> None:
    devs = devices({"n1": ("a100", 2), "n2": ("a100", 4)})
    snap = snapshot([], devs)
    free = [d for d in devs if d.id != 0]
    assert gpu_count_place([pending(1, 3)], free, snap) == {1: (1, 2, 3)}


def test_gpu_count_place_still_keeps_required_jobs_on_one_node() -> None:
    devs = devices({"n1": ("a100", 2), "n2": ("a100", 4)})
    snap = snapshot([], devs)
    placed = gpu_count_place([pending(1, 3, consolidation=REQUIRED)], devs, snap)
    assert placed == {1: (2, 3, 4)}


def test_both_reference_placers_are_registered() -> None:
    assert PLACERS[PlacementKind.BEST_FIT] is best_fit_place
    assert PLACERS[PlacementKind.GPU_COUNT] is gpu_count_place
