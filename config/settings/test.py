"""Tests: the real PostgreSQL and Redis of this machine.

DATABASE_URL (default postgres://postgres@127.0.0.1:5432/gpulab) is probed at import.
With CI=true an unreachable server stops the run loudly; on a developer's machine the
suite falls back to SQLite with a warning, so a newcomer without PostgreSQL can still
run most tests (tests that need PostgreSQL skip themselves there).
"""

from __future__ import annotations

import os
import sys

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import BASE_DIR, DATABASES, REDIS_URL, env, env_bool

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; never in production


def _postgres_reachable(config: dict) -> str | None:
    """Return None when the server answers, else the reason it does not."""
    import psycopg2

    try:
        connection = psycopg2.connect(
            dbname="postgres",
            user=config.get("USER") or "postgres",
            password=config.get("PASSWORD") or None,
            host=config.get("HOST") or "127.0.0.1",
            port=config.get("PORT") or 5432,
            connect_timeout=3,
        )
    except psycopg2.OperationalError as exc:
        return str(exc).strip()
    connection.close()
    return None


# CI=true (or 1, yes): a service the tests need (PostgreSQL, Redis, sshd, Chromium) that is
# missing fails the run instead of being skipped or replaced; the conftests read this too.
STRICT_SERVICES = env_bool("CI", False)

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    problem = _postgres_reachable(DATABASES["default"])
    if problem:
        if STRICT_SERVICES:
            raise ImproperlyConfigured(
                f"CI=true and PostgreSQL is unreachable at DATABASE_URL: {problem}. "
                "CI must test against PostgreSQL; refusing to fall back to SQLite."
            )
        print(
            f"WARNING: PostgreSQL unreachable ({problem}); falling back to SQLite. "
            "Start PostgreSQL for the full suite.",
            file=sys.stderr,
        )
        DATABASES = {
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "test.sqlite3"}
        }

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Two test runs at once on one server need different test databases.
    test_database = env.str("GPULAB_TEST_DATABASE", default="")
    if test_database:
        DATABASES["default"]["TEST"] = {"NAME": test_database}
    # A throwaway test database needs no durable commits; this makes each commit cheap.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"

# One key prefix and one Celery queue per test run, so parallel runs and stale keys never
# collide; a Celery worker started by the tests is handed the same names.
TEST_RUN_ID = env.str("GPULAB_TEST_RUN_ID", default=f"gpulab-test-{os.getpid()}")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": TEST_RUN_ID,
    }
}

# Serve static files straight from the app folders; no collectstatic needed here.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

# Tests drive rounds directly; the Celery tests start a real worker on their own queue.
GPULAB_SCHEDULER_MODE = "off"
CELERY_TASK_DEFAULT_QUEUE = TEST_RUN_ID
