"""Login lockouts live in the shared Redis cache, keyed by (username, address) pair and
by address: each test here starts and ends without any, so no count leaks into another
test. Clearing a username clears it from every address, an address every username."""

from __future__ import annotations

import pytest

from accounts.lockout import login_failures_clear

USERNAMES = ("alice", "bob", "carol", "root", "dave", "nobody")


def _clear_lockouts() -> None:
    for username in USERNAMES:
        login_failures_clear(username=username)
    for address in (
        "127.0.0.1",
        "203.0.113.7",
        "203.0.113.8",
        "198.51.100.1",
        "192.0.2.55",
        "192.0.2.56",
    ):
        login_failures_clear(ip=address)


@pytest.fixture(autouse=True)
def _no_login_lockouts():
    _clear_lockouts()
    yield
    _clear_lockouts()
