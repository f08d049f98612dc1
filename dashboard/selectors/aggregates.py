"""Caching of what is built only from the aggregates (figures, their tables).

Between two runs of `aggregates_update` such a figure cannot change, so it is cached under
the run's `version`: exact, never stale, and rebuilt once per run instead of once per view.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from django.core.cache import cache

from ..models import AggregatesState

T = TypeVar("T")
# Longer than the task's 60 s period: an entry outlives its run only while nothing reran.
CACHE_SECONDS = 600


def aggregates_version() -> tuple[str, datetime] | None:
    """(version, as-of time) of the last aggregation run, or None before the first one."""
    row = AggregatesState.objects.filter(pk=1).values_list("version", "updated_at").first()
    if row is None or row[0] is None or row[1] is None:
        return None
    return str(row[0]), row[1]


def cached_on_aggregates(key: str, build: Callable[[datetime | None], T]) -> T:
    """`build(as_of)` once per aggregation run and `key`; as_of is the run's time.

    Before the first run there is nothing to cache on: `build(None)` every time.
    """
    version = aggregates_version()
    if version is None:
        return build(None)
    token, as_of = version
    cache_key = f"dashboard:{key}:{token}"
    value = cache.get(cache_key)
    if value is None:
        value = build(as_of)
        cache.set(cache_key, value, CACHE_SECONDS)
    return value
