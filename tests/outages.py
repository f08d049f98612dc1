"""Redis made unreachable for one test: Celery's broker or Django's cache pointed at a
port nothing listens on, as in an outage. No stand-in: the real clients fail for real."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from config.celery_app import app

# The discard port: nothing listens there.
DEAD_REDIS_URL = "redis://127.0.0.1:9/0"
DEAD_CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": DEAD_REDIS_URL,
    }
}


def _point_broker_at(url: str) -> None:
    # Only this app's references go: kombu's connection pools are shared per URL.
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None


@contextmanager
def broker_unreachable() -> Iterator[Callable[[], None]]:
    """Celery's broker is down inside the block; yields the function that brings it back
    early (it comes back at the end of the block anyway)."""
    live = app.conf.broker_url
    _point_broker_at(DEAD_REDIS_URL)
    try:
        yield lambda: _point_broker_at(live)
    finally:
        _point_broker_at(live)
