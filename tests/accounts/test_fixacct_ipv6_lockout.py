"""An IPv6 client is counted by its /64: it may send each attempt from another address of
the /64 it was given, so per-address counting would never lock it out. IPv4 addresses
count as themselves, and an IPv4-mapped IPv6 address as its IPv4 address."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from accounts.lockout import counted_address, login_failures_clear

# Every network these tests try from, cleared before and after each (the lockouts live in
# the shared Redis cache; tests/accounts/conftest.py clears the usernames).
NETWORKS = ("2001:db8:1:2::", "2001:db8:1:3::", "2001:db8:9:9::", "203.0.113.9")


@pytest.fixture(autouse=True)
def _no_network_lockouts():
    for network in NETWORKS:
        login_failures_clear(ip=network)
    yield
    for network in NETWORKS:
        login_failures_clear(ip=network)


def login(username: str, password: str, address: str) -> int:
    response = Client(REMOTE_ADDR=address).post(
        "/login/", {"username": username, "password": password}
    )
    return response.status_code


@pytest.mark.parametrize(
    ("address", "counted"),
    [
        ("203.0.113.9", "203.0.113.9"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::abcd", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        ("::1", "::/64"),
        ("2001:db8:1:2::/64", "2001:db8:1:2::/64"),  # as the log and login_unlock name it
        ("2001:db8:1:2::5/64", "2001:db8:1:2::/64"),
        ("2001:db8::/48", "2001:db8::/48"),  # not a counted unit: as given
        ("", ""),  # unknown: counted as given
        ("not-an-address", "not-an-address"),
    ],
)
def test_what_an_address_is_counted_under(address, counted):
    assert counted_address(address) == counted


@pytest.mark.django_db
def test_guessing_from_a_new_address_of_the_same_64_each_time_still_locks_out(owner):
    statuses = {login("alice", f"guess-{i}", f"2001:db8:1:2::{i + 1:x}") for i in range(10)}
    assert statuses == {200}

    assert login("alice", "pw-alice-123", "2001:db8:1:2::beef") == 429
    # Another /64 is another client.
    assert login("alice", "pw-alice-123", "2001:db8:1:3::1") == 302


@pytest.mark.django_db
@override_settings(GPULAB_LOGIN_MAX_FAILURES=2)  # a network locks at 10 x 2 = 20
def test_spraying_usernames_from_rotating_addresses_locks_the_whole_64(owner):
    for i in range(20):
        login(f"user{i}", "guess", f"2001:db8:1:2::{i + 1:x}")

    assert login("alice", "pw-alice-123", "2001:db8:1:2::ffff") == 429


@pytest.mark.django_db
def test_an_ipv4_mapped_address_counts_with_its_ipv4_address(owner):
    for i in range(5):
        login("alice", f"guess-{i}", "203.0.113.9")
    for i in range(5):
        login("alice", f"guess-{i}", "::ffff:203.0.113.9")

    assert login("alice", "pw-alice-123", "203.0.113.9") == 429


@pytest.mark.django_db
def test_login_unlock_with_any_address_of_the_64_clears_it(owner):
    for i in range(10):
        login("alice", f"guess-{i}", f"2001:db8:9:9::{i + 1:x}")
    assert login("alice", "pw-alice-123", "2001:db8:9:9::1") == 429

    out = StringIO()
    call_command("login_unlock", "2001:db8:9:9::77", stdout=out)

    assert "2001:db8:9:9::/64" in out.getvalue()
    assert login("alice", "pw-alice-123", "2001:db8:9:9::1") == 302


def test_login_unlock_takes_the_64_as_the_lockout_log_names_it(owner):
    for i in range(10):
        login("alice", f"guess-{i}", f"2001:db8:9:9::{i + 1:x}")
    assert login("alice", "pw-alice-123", "2001:db8:9:9::1") == 429

    out = StringIO()
    call_command("login_unlock", "2001:db8:9:9::/64", stdout=out)

    assert "Nothing to clear" not in out.getvalue()
    assert login("alice", "pw-alice-123", "2001:db8:9:9::1") == 302
