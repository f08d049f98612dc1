"""Rate limits that fail open when the cache holding their counters is unreachable.

DRF's throttles keep their history in Django's cache (Redis). A rate limit protects the
database from floods; it is not a condition of the request itself, so an outage of Redis
must not turn every submission or heartbeat into a 500 (sessions, jobs and node state live
in PostgreSQL and still work). Meanwhile the limit is skipped and the outage is logged.
"""

from __future__ import annotations

import logging

from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle

logger = logging.getLogger(__name__)


class FailOpenThrottle(SimpleRateThrottle):
    def allow_request(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        try:
            return super().allow_request(request, view)
        except Exception:
            logger.error(
                "Rate limit %r not checked: the cache is unreachable.",
                getattr(self, "scope", None),
                exc_info=True,
            )
            return True


class FailOpenScopedRateThrottle(FailOpenThrottle, ScopedRateThrottle):
    """`ScopedRateThrottle` (the view's `throttle_scope`), failing open."""
