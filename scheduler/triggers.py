"""Asking for a scheduling round when something happened (submit, cancel, finish).

Requests are coalesced: a burst of 100 submissions causes a round or two, not 100. In
Celery mode a short-lived Redis key (cache.add = SET NX) lets only the first request of
a burst enqueue a round; the round clears the key when it starts, so a request arriving
during a round queues the next one. In embedded mode the demo loop is woken instead.
"""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

REQUEST_KEY = "scheduler:round-requested"
# Requests within this window share one round.
COALESCE_SECONDS = 1.0


def round_request_on_commit() -> None:
    """Request a round once the current transaction commits (at once if there is none)."""
    transaction.on_commit(round_request)


def round_request() -> None:
    mode = settings.GPULAB_SCHEDULER_MODE
    if mode == "embedded":
        from .embedded import wake

        wake()
    elif mode == "celery" and cache.add(REQUEST_KEY, 1, timeout=30):
        from .tasks import scheduling_round_task

        scheduling_round_task.apply_async(
            kwargs={"trigger": "event"}, countdown=COALESCE_SECONDS, expires=60
        )


def round_request_clear() -> None:
    cache.delete(REQUEST_KEY)
