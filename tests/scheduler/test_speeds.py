"""Measured rates → relative speeds (`scheduler.core.speeds.relative_speeds`)."""

from __future__ import annotations

import pytest

from scheduler.core.speeds import relative_speeds

ADMIN = {"a100": 1.0, "v100": 0.6, "k80": 0.2}


@pytest.mark.parametrize(
    ("rates", "speeds"),
    [
        # Proportional to the admin's speeds: exactly the admin's speeds, whatever the unit.
        (
            {"a100": 500.0, "v100": 300.0, "k80": 100.0},
            (("a100", 1.0), ("k80", 0.2), ("v100", 0.6)),
        ),
        # 10x apart where the admin set 5x: the ratio is kept, the geometric mean agrees.
        ({"a100": 1000.0, "k80": 100.0}, (("a100", 1.41), ("k80", 0.14))),
        # Faster on the older type (Gavel's recommenders): kept.
        ({"a100": 100.0, "k80": 150.0}, (("a100", 0.37), ("k80", 0.55))),
    ],
)
def test_rates_keep_their_ratios_in_the_admins_unit(
    rates: dict[str, float], speeds: tuple[tuple[str, float], ...]
) -> None:
    assert relative_speeds(rates, ADMIN) == speeds


@pytest.mark.parametrize(
    "rates",
    [
        {},
        {"a100": 500.0},  # one type: no ratio
        {"a100": 500.0, "h100": 900.0},  # a type the cluster does not have
        {"a100": 500.0, "k80": 0.0},  # a stalled attempt says nothing about speed
        {"a100": 500.0, "k80": float("nan")},
    ],
)
def test_without_two_usable_types_there_is_no_speed_profile(rates: dict[str, float]) -> None:
    assert relative_speeds(rates, ADMIN) == ()


def test_a_very_slow_type_keeps_a_positive_speed() -> None:
    assert dict(relative_speeds({"a100": 1e6, "k80": 1.0}, ADMIN))["k80"] == 0.01
