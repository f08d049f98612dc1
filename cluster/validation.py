"""The rules for a node's per-GPU limit labels, in one place.

The Nodes admin form refuses a bad limit when it is saved (`cluster.admin.NodeAdminForm`)
and the launch refuses one a row still carries (written before the rule, or from a shell:
`agents.services._launch_spec`), with the same rule and the same words.

One rule for both labels: absent, null or 0 means no limit; anything else must be a JSON
number, finite and positive (a whole number for memory: `8000.0` is read as 8000). A
numeric string ("8") is refused: a label is JSON, and a number stored as text would be a
second spelling of the same limit for every reader to parse (Python's float() alone takes
"1_0", " 8 " and "inf").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Label name → what it must be (both messages say "Label <name> <rule>").
LIMIT_LABEL_RULES = {
    "cpus_per_gpu": "must be a positive number of CPUs, e.g. 8 or 2.5 (0 for no limit)",
    "memory_mb_per_gpu": "must be a positive whole number of MiB, e.g. 65536 (0 for no limit)",
}
WHOLE_LABELS = frozenset({"memory_mb_per_gpu"})


class BadLimitLabel(ValueError):
    """A limit label breaks its rule; the message is the rule."""


def limit_label(labels: Mapping[str, Any], name: str) -> float | None:
    """The per-GPU limit label `name` of `labels`; None for no limit (absent, null, 0).

    Raises BadLimitLabel (its message: `LIMIT_LABEL_RULES[name]`) for anything else that
    is not a finite positive JSON number, or not a whole one for a whole-number label.
    """
    value = labels.get(name)
    if value is None:
        return None
    # bool is an int in Python; `true` is no CPU count.
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise BadLimitLabel(LIMIT_LABEL_RULES[name])
    try:
        number = float(value)
    except OverflowError:  # an integer past any float (JSON has no limit on digits)
        number = math.inf
    if not (math.isfinite(number) and number >= 0):
        raise BadLimitLabel(LIMIT_LABEL_RULES[name])
    if name in WHOLE_LABELS and not number.is_integer():
        raise BadLimitLabel(LIMIT_LABEL_RULES[name])
    return number or None


def limit_label_errors(labels: Mapping[str, Any]) -> dict[str, str]:
    """Each limit label of `labels` that breaks its rule → `Label <name> <rule>.`"""
    errors = {}
    for name in LIMIT_LABEL_RULES:
        try:
            limit_label(labels, name)
        except BadLimitLabel as exc:
            errors[name] = f"Label {name} {exc}."
    return errors
