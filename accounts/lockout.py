"""Brute-force protection for password checks: the logins (the site's and the Django
admin's) and the old password of the password-change pages (accounts.forms).

Attempts are counted in Django's default cache (Redis in production, the process's memory
in the demo), at two levels:

1. Per (username, address) pair: GPULAB_LOGIN_MAX_FAILURES (10) failed attempts within
   GPULAB_LOGIN_LOCKOUT_SECONDS (15 min) of the pair's first attempt lock that pair out for
   GPULAB_LOGIN_LOCKOUT_SECONDS. Only that pair: someone guessing `root`'s password from
   elsewhere cannot keep root out, since root's own address is another pair.
2. Per address, over every username: ADDRESS_LIMIT_FACTOR times as many (100) lock the
   address out for every username. That stops password spraying across many usernames
   from one address, without catching a whole lab behind one NAT when one student
   mistypes ten times.

Each attempt first reserves its place: the pair's and the address's counters are
incremented atomically (INCR in Redis) before the password is checked, and an attempt
whose counter had already reached the limit is refused. So at most the limit of
passwords are checked per pair (and per address) per window, however many attempts run
at once. A locked-out attempt is refused before the password is checked, so guessing
stops paying off. A successful login clears its pair and hands its address reservation
back; so does a right password the page refuses (inactive, or not staff on the admin):
neither is a guess. The old password a password-change page asks for is the same
guess under the session's username, so it reserves, counts and clears the same pair and
address: someone holding a session (a borrowed laptop) must not try passwords there
without limit. `manage.py login_unlock` clears a username or an address early.

An address is an IPv4 address, or an IPv6 client's /64 (an IPv4-mapped IPv6 address is
its IPv4 address): a host is given at least a whole /64 and may send each attempt from
another address in it, so counting single IPv6 addresses would give one client 2^64
fresh budgets. (A /64 is the smallest subnet SLAAC works with; one site may hold more.)

Windows are fixed (they start at the first attempt) rather than sliding: one counter
with an expiry, and never more than twice the limit per window. With the cache
unreachable, logins still work, unguarded (and say so in the log): sessions live in the
database, and an outage of Redis must not lock every user out or answer 500.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone

logger = logging.getLogger("accounts.login")

# An address is locked for every username after this many times the per-pair limit.
# (A setting once an admin needs to tune it: GPULAB_LOGIN_ADDRESS_MAX_FAILURES.)
ADDRESS_LIMIT_FACTOR = 10
# Index entries read per cache round trip by login_failures_clear.
_INDEX_READ_CHUNK = 500


def max_failures() -> int:
    return settings.GPULAB_LOGIN_MAX_FAILURES


def address_max_failures() -> int:
    return ADDRESS_LIMIT_FACTOR * max_failures()


def lockout_seconds() -> int:
    return settings.GPULAB_LOGIN_LOCKOUT_SECONDS


def client_ip(request: HttpRequest | None) -> str:
    """The address a login attempt came from.

    Behind N trusted reverse proxies (GPULAB_TRUSTED_PROXY_COUNT, default 0) it is the
    N-th address from the right of X-Forwarded-For: the one the outermost trusted proxy
    saw. Entries further left are whatever the client chose to send, so they are never
    trusted; without a proxy count every client behind the proxy would share one
    address, and one address lockout.
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


def counted_address(ip: str) -> str:
    """What attempts from `ip` are counted under: an IPv4 address as it is, an IPv6 one as
    its /64 ("2001:db8::/64"), an IPv4-mapped IPv6 one as its IPv4 address. Anything else
    (an empty, unknown address) is returned unchanged. A /64 as this prints it (in the log,
    by `login_unlock`) is its own counted address, so it can be given back to clear it."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        try:
            network = ipaddress.ip_network(ip, strict=False)
        except ValueError:
            return ip
        if isinstance(network, ipaddress.IPv6Network) and network.prefixlen == 64:
            return str(network)
        return ip
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    # From the integer: a zone ("fe80::1%eth0") names a local link, not a network.
    return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))


def _digest(text: str) -> str:
    # Hashed in keys: a username may hold characters or lengths some cache backends refuse.
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Counted:
    """One thing attempts are counted for: a (username, address) pair or an address."""

    identity: str  # the cache-key suffix
    limit: int
    described: str  # what the log and login_unlock call it

    @property
    def count_key(self) -> str:
        return f"login-failures:{self.identity}"

    @property
    def lock_key(self) -> str:
        return f"login-locked:{self.identity}"


def _pair(username: str, ip: str) -> _Counted:
    folded = username.casefold()  # any case is the same account
    return _Counted(
        identity=f"pair:{_digest(folded + chr(0) + ip)}",
        limit=max_failures(),
        described=f"username {folded!r} from {ip or 'an unknown address'}",
    )


def _address(ip: str) -> _Counted:
    return _Counted(
        identity=f"ip:{_digest(ip)}",
        limit=address_max_failures(),
        described=f"address {ip} (every username)",
    )


def _counted(*, username: str, ip: str) -> list[_Counted]:
    return [_pair(username, ip), _address(ip)] if ip else [_pair(username, ip)]


# Which addresses a username was tried from, and which usernames an address tried, so
# login_unlock can find the pairs (a cache has no portable way to list keys). Each index
# is a counter and one slot per entry, written once per new pair: atomic on Redis and in
# memory alike. Slots live two windows (a pair's lock ends at most two windows after its
# first attempt); the counter is touched to outlive them all, so it never restarts over
# a live slot.
def _index_add(owner: str, member: str, *, ttl: int) -> None:
    size_key = f"login-index:{owner}:size"
    slot = _counter_reserve(size_key, ttl)
    cache.set(f"login-index:{owner}:{slot}", member, timeout=ttl)
    cache.touch(size_key, ttl)


def _index_members(owner: str) -> set[str]:
    size = cache.get(f"login-index:{owner}:size") or 0
    members: set[str] = set()
    for start in range(1, size + 1, _INDEX_READ_CHUNK):
        slots = range(start, min(start + _INDEX_READ_CHUNK, size + 1))
        members.update(cache.get_many([f"login-index:{owner}:{slot}" for slot in slots]).values())
    return members


def _counter_reserve(key: str, window: int) -> int:
    """Add one to a counter, starting its window if it has none; return the new count."""
    while True:
        if cache.add(key, 1, timeout=window):
            return 1
        try:
            count = cache.incr(key)
        except ValueError:  # the window ended between add() and incr(): start a new one
            continue
        if count <= 1:
            # Redis INCR on a key that expired just after Django's existence check creates
            # it without an expiry, which would lock for ever: make sure it has one.
            cache.touch(key, window)
        return count


def _counter_release(key: str) -> None:
    """Give back one reserved attempt that turned out not to be a guess."""
    try:
        count = cache.decr(key)
    except ValueError:  # the window ended: nothing left to give back
        return
    if count < 0:  # the key had expired and DECR created it, without an expiry
        cache.delete(key)


def _lock(counted: _Counted, *, window: int, attempts: int) -> datetime:
    """Lock `counted` out for a window, unless it already is; return when its lock ends."""
    until = timezone.now() + timedelta(seconds=window)
    if cache.add(counted.lock_key, until.timestamp(), timeout=window):
        logger.warning(
            "Logins locked for %s until %s after %d failures",
            counted.described,
            until.isoformat(timespec="seconds"),
            attempts,
        )
        return until
    existing = cache.get(counted.lock_key)
    return until if existing is None else datetime.fromtimestamp(existing, tz=UTC)


def _locked_until(counted: list[_Counted]) -> datetime | None:
    locks = cache.get_many([c.lock_key for c in counted])
    return datetime.fromtimestamp(max(locks.values()), tz=UTC) if locks else None


def login_attempt_reserve(*, username: str, ip: str) -> datetime | None:
    """Reserve one password check for this username from this address, before checking it.

    Returns None when the password may be checked, or when the refusal ends: the pair or
    the address is locked out, or its counter had already reached the limit (attempts
    running at once), which locks it now.
    """
    try:
        return _reserve(username=username, ip=counted_address(ip))
    except Exception:
        logger.error("Login lockout not checked: the cache is unreachable.", exc_info=True)
        return None


def _reserve(*, username: str, ip: str) -> datetime | None:
    window = lockout_seconds()
    counted = _counted(username=username, ip=ip)
    locked_until = _locked_until(counted)
    if locked_until is not None:
        # Refused without counting: retrying a locked pair must not add up to its address's limit.
        return locked_until
    reserved: list[str] = []
    for index, each in enumerate(counted):
        attempts = _counter_reserve(each.count_key, window)
        if attempts == 1 and index == 0:  # a new pair: index it for login_unlock
            _index_add(f"user:{_digest(username.casefold())}", ip, ttl=2 * window)
            if ip:
                _index_add(f"ip:{_digest(ip)}", username.casefold(), ttl=2 * window)
        if attempts > each.limit:
            for key in reserved:  # not checked, so not counted there
                _counter_release(key)
            return _lock(each, window=window, attempts=attempts - 1)
        reserved.append(each.count_key)
    return None


def login_failure_record(*, username: str, ip: str) -> datetime | None:
    """A reserved attempt's password was wrong: it stays counted. Lock the pair or the
    address if its count reached the limit; return when that lockout ends, if one did."""
    # The password is never logged; the username with %r, so a crafted one cannot forge lines.
    logger.warning("Failed login for username %r from %s", username, ip or "an unknown address")
    try:
        window = lockout_seconds()
        counted = _counted(username=username, ip=counted_address(ip))
        counts = cache.get_many([c.count_key for c in counted])
        locks = [
            _lock(c, window=window, attempts=counts[c.count_key])
            for c in counted
            if counts.get(c.count_key, 0) >= c.limit
        ]
    except Exception:
        logger.error("Failed login not counted: the cache is unreachable.", exc_info=True)
        return None
    return max(locks, default=None)


def login_success_record(*, username: str, ip: str) -> None:
    """A reserved attempt logged in: clear its pair, and give its address's place back
    (a lab logging in behind one address must never add up to the address's limit)."""
    ip = counted_address(ip)
    try:
        pair = _pair(username, ip)
        cache.delete_many([pair.count_key, pair.lock_key])
        if ip:
            _counter_release(_address(ip).count_key)
    except Exception:
        logger.error("Login failures not cleared: the cache is unreachable.", exc_info=True)


def login_attempt_release(*, username: str, ip: str) -> None:
    """A reserved attempt was not a guess (the right password, for an account the page
    refuses): give both its places back."""
    try:
        for each in _counted(username=username, ip=counted_address(ip)):
            _counter_release(each.count_key)
    except Exception:
        logger.error("Login attempt not released: the cache is unreachable.", exc_info=True)


@dataclass(frozen=True)
class LockoutCleared:
    """What login_failures_clear found and cleared for one pair or address."""

    described: str
    failures: int
    locked_until: datetime | None


def login_failures_clear(*, username: str = "", ip: str = "") -> list[LockoutCleared]:
    """Forget the failures and lockouts of this username (from every address it was tried
    from) and/or of this address (its own count, and every username tried from it).

    Returns what there was to clear. Raises if the cache is unreachable. An IPv6 address
    clears its whole /64, the unit attempts are counted in.
    """
    ip = counted_address(ip)
    pairs: set[tuple[str, str]] = set()
    if username:
        folded = username.casefold()
        pairs.update((folded, member) for member in _index_members(f"user:{_digest(folded)}"))
    if ip:
        pairs.update((member, ip) for member in _index_members(f"ip:{_digest(ip)}"))
    targets = [_pair(u, address) for u, address in sorted(pairs)]
    if ip:
        targets.append(_address(ip))
    keys = [key for t in targets for key in (t.count_key, t.lock_key)]
    found = cache.get_many(keys)
    cache.delete_many(keys)
    cleared = []
    for target in targets:
        failures = found.get(target.count_key, 0)
        lock = found.get(target.lock_key)
        if failures > 0 or lock is not None:
            locked_until = None if lock is None else datetime.fromtimestamp(lock, tz=UTC)
            cleared.append(LockoutCleared(target.described, failures, locked_until))
    return cleared


def lockout_message(locked_until: datetime) -> str:
    """What the login form says to a locked-out visitor: when to try again."""
    minutes = max(1, math.ceil((locked_until - timezone.now()).total_seconds() / 60))
    local = timezone.localtime(locked_until)
    return (
        "Too many failed logins for this account or from your address. "
        f"Try again after {local:%H:%M} {local.tzname()} (in {minutes} minute"
        f"{'s' if minutes != 1 else ''})."
    )
