"""Cache calls that fail open: gpulab uses the cache (Redis) only for guards and short
memories, so an unreachable cache costs the guard, never the work or the request.

Django's Redis cache raises on a connection error; each call here logs it and answers as
if the cache held nothing (`get`), had no guard set (`add` → True: go ahead), or took the
write (`set`, `delete`).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache

logger = logging.getLogger(__name__)


def cache_get(key: str) -> Any:
    try:
        return cache.get(key)
    except Exception:
        logger.warning("Cache read of %s skipped: the cache is unreachable.", key, exc_info=True)
        return None


def cache_set(key: str, value: Any, *, timeout: float) -> None:
    try:
        cache.set(key, value, timeout=int(timeout))
    except Exception:
        logger.warning("Cache write of %s skipped: the cache is unreachable.", key, exc_info=True)


def cache_add(key: str, *, timeout: float) -> bool:
    """`cache.add` of a guard: True where the caller may go ahead (it set the key, or the
    cache is unreachable and the guard is skipped)."""
    try:
        return bool(cache.add(key, 1, timeout=int(timeout)))
    except Exception:
        logger.warning("Guard %s skipped: the cache is unreachable.", key, exc_info=True)
        return True


def cache_delete(key: str) -> None:
    try:
        cache.delete(key)
    except Exception:
        logger.warning("Guard %s not cleared: the cache is unreachable.", key, exc_info=True)
