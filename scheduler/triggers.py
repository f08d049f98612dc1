"""Asking for a scheduling round when something happened (submit, cancel, finish).

Requests are coalesced: a burst of 100 submissions causes a round or two, not 100. In
Celery mode a short-lived Redis key (cache.add = SET NX) lets only the first request of
a burst enqueue a round; the round clears the key when it starts, so a request arriving
during a round queues the next one. In embedded mode the demo loop is woken instead.

A request is a hint, never a condition of the change that asked for it: it runs after
that change committed, and the timer (beat, every `round_interval_seconds`) schedules
the job anyway. So Redis or the broker being unreachable is logged, never raised: a
submission or cancel that committed must not answer 500.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from config.fail_open_cache import cache_delete

logger = logging.getLogger(__name__)

REQUEST_KEY = "scheduler:round-requested"
# Requests within this window share one round.
COALESCE_SECONDS = 1.0
# How long the coalescing key lives if no round clears it (a lost message, say).
REQUEST_KEY_SECONDS = 30


def round_request_on_commit() -> None:
    """Request a round once the current transaction commits (at once if there is none)."""
    # robust: whatever a request does, the callbacks registered after it still run.
    transaction.on_commit(round_request, robust=True)


def round_request() -> None:
    """Ask for a round soon; failures are logged (the timer's round still comes)."""
    mode = settings.GPULAB_SCHEDULER_MODE
    if mode == "embedded":
        from .embedded import wake

        wake()
    elif mode == "celery":
        _round_request_celery()


def _round_request_celery() -> None:
    try:
        first_of_burst = cache.add(REQUEST_KEY, 1, timeout=REQUEST_KEY_SECONDS)
    except Exception:
        logger.warning("Round request skipped: the cache is unreachable.", exc_info=True)
        return
    if not first_of_burst:
        return
    from .tasks import scheduling_round_task

    try:
        scheduling_round_task.apply_async(
            kwargs={"trigger": "event"}, countdown=COALESCE_SECONDS, expires=60
        )
    except Exception:
        logger.warning("Round request not sent: the broker is unreachable.", exc_info=True)
        # No round is coming for this burst: let the next request try again at once
        # instead of being swallowed by the key for REQUEST_KEY_SECONDS.
        round_request_clear()


def round_request_clear() -> None:
    """Forget the pending request, so the next event asks for a new round. Without the
    cache the key expires by itself; until then requests are coalesced into the timer's."""
    cache_delete(REQUEST_KEY)
