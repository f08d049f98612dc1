"""Brute-force protection for password logins (the site's and the Django admin's).

Failed logins are counted in Django's default cache (Redis in production, the process's
memory in the demo), per username and per client address. Once either count reaches
GPULAB_LOGIN_MAX_FAILURES within GPULAB_LOGIN_LOCKOUT_SECONDS of its first failure, that
username or address is locked out for GPULAB_LOGIN_LOCKOUT_SECONDS: attempts are refused
before the password is even checked, so guessing stops paying off. A successful login
clears its username's count.

The window is fixed (it starts at the first failure) rather than sliding: one counter
with an expiry, atomic in Redis (INCR), and never more than twice the limit per window.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone

logger = logging.getLogger("accounts.login")


def max_failures() -> int:
    return settings.GPULAB_LOGIN_MAX_FAILURES


def lockout_seconds() -> int:
    return settings.GPULAB_LOGIN_LOCKOUT_SECONDS


def client_ip(request: HttpRequest | None) -> str:
    """The address a login attempt came from.

    Behind N trusted reverse proxies (GPULAB_TRUSTED_PROXY_COUNT, default 0) it is the
    N-th address from the right of X-Forwarded-For: the one the outermost trusted proxy
    saw. Entries further left are whatever the client chose to send, so they are never
    trusted; without a proxy count every client behind the proxy would share one
    address, and one lockout.
    """
    if request is None:
        return ""
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.GPULAB_TRUSTED_PROXY_COUNT
    if proxies > 0:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if len(hops) >= proxies:
            return hops[-proxies]
    return remote


def _identities(*, username: str | None, ip: str | None) -> list[tuple[str, str]]:
    """What is counted, as (cache-key suffix, what the log calls it): the username (any
    case) and the address.

    Hashed in the key: a username may hold characters or lengths some cache backends
    refuse in keys.
    """
    identities = []
    if username:
        digest = hashlib.sha256(username.casefold().encode()).hexdigest()
        identities.append((f"user:{digest}", f"username {username!r}"))
    if ip:
        identities.append((f"ip:{hashlib.sha256(ip.encode()).hexdigest()}", f"address {ip}"))
    return identities


def _count_key(identity: str) -> str:
    return f"login-failures:{identity}"


def _lock_key(identity: str) -> str:
    return f"login-locked:{identity}"


def login_locked_until(*, username: str | None, ip: str | None) -> datetime | None:
    """When the lockout of this username or address ends (the later one), or None."""
    identities = _identities(username=username, ip=ip)
    try:
        locks = cache.get_many([_lock_key(identity) for identity, _ in identities])
    except Exception:
        # Sessions live in the database: with the cache down, logins still work, unguarded
        # (an outage of Redis must not lock every user out or answer 500).
        logger.error("Login lockout not checked: the cache is unreachable.", exc_info=True)
        return None
    if not locks:
        return None
    return datetime.fromtimestamp(max(locks.values()), tz=UTC)


def login_failure_record(*, username: str | None, ip: str | None) -> datetime | None:
    """Count one failed login; return when the lockout it started ends, if it started one."""
    window = lockout_seconds()
    # The password is never logged; the username with %r, so a crafted one cannot forge lines.
    logger.warning("Failed login for username %r from %s", username, ip or "an unknown address")
    try:
        return _failure_count(username=username, ip=ip, window=window)
    except Exception:
        logger.error("Failed login not counted: the cache is unreachable.", exc_info=True)
        return None


def _failure_count(*, username: str | None, ip: str | None, window: int) -> datetime | None:
    locked_until = None
    for identity, described in _identities(username=username, ip=ip):
        key = _count_key(identity)
        cache.add(key, 0, timeout=window)  # starts the window at the first failure
        try:
            failures = cache.incr(key)
        except ValueError:  # the window expired between add() and incr()
            cache.add(key, 1, timeout=window)
            failures = 1
        if failures >= max_failures():
            locked_until = timezone.now() + timedelta(seconds=window)
            cache.set(_lock_key(identity), locked_until.timestamp(), timeout=window)
            logger.warning(
                "Logins locked for %s until %s after %d failures",
                described,
                locked_until.isoformat(timespec="seconds"),
                failures,
            )
    return locked_until


def login_failures_clear(*, username: str | None = None, ip: str | None = None) -> None:
    """Forget the failures and lockout of this username and/or address."""
    identities = _identities(username=username, ip=ip)
    keys = [key for i, _ in identities for key in (_count_key(i), _lock_key(i))]
    try:
        cache.delete_many(keys)
    except Exception:
        logger.error("Login failures not cleared: the cache is unreachable.", exc_info=True)


def lockout_message(locked_until: datetime) -> str:
    """What the login form says to a locked-out visitor: when to try again."""
    minutes = max(1, math.ceil((locked_until - timezone.now()).total_seconds() / 60))
    local = timezone.localtime(locked_until)
    return (
        "Too many failed logins for this account or from your address. "
        f"Try again after {local:%H:%M} {local.tzname()} (in {minutes} minute"
        f"{'s' if minutes != 1 else ''})."
    )
