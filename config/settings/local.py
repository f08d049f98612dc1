"""The demo and development: an embedded SQLite database, no Redis needed."""

from __future__ import annotations

from .base import *  # noqa: F403
from .base import BASE_DIR, env, env_bool

DEBUG = env_bool("DJANGO_DEBUG", True)
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
# The demo must start without Redis: an in-process cache is enough for one server process.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Serve static files straight from the app folders; no collectstatic needed here.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

# The demo runs scheduling rounds and simulated agents in a thread of the web process.
GPULAB_SCHEDULER_MODE = env.str("GPULAB_SCHEDULER_MODE", default="embedded")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web threads and the embedded loop write concurrently. SQLite's default DEFERRED
    # transactions begin as readers; one that has read and then writes while another
    # connection writes (or has written since) fails at once with "database is locked":
    # waiting there could deadlock, so the busy timeout never applies. IMMEDIATE takes
    # the write lock at BEGIN, where a transaction does wait its turn (up to `timeout`
    # seconds); WAL lets reads go on meanwhile. Django 5.1+ reads both options.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL;",
        }
    )

# SQLite cannot enforce UsageHour's unique constraint with NULL groups (PostgreSQL does);
# the aggregation writes each key once from a dict, so the demo loses nothing without it.
SILENCED_SYSTEM_CHECKS = ["models.W047"]
