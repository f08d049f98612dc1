"""The one-round-at-a-time guard.

On PostgreSQL a session-level advisory lock: held by the database connection, so a worker
killed mid-round releases it when its connection drops, and any number of worker
processes and hosts agree on it. On SQLite (the single-process demo) a process lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

# An arbitrary constant naming "the scheduling round" among advisory locks ("gpul" in hex).
ROUND_LOCK_KEY = 0x6770756C
_process_lock = threading.Lock()


@contextmanager
def round_lock() -> Iterator[bool]:
    """Yield True while holding the round lock, or False at once if another round has it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ROUND_LOCK_KEY])
            acquired = cursor.fetchone()[0]
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [ROUND_LOCK_KEY])
        return
    acquired = _process_lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            _process_lock.release()
