"""Brute force on the login pages: after GPULAB_LOGIN_MAX_FAILURES (10) wrong passwords in
GPULAB_LOGIN_LOCKOUT_SECONDS (15 min), a (username, address) pair is refused with 429 before
its password is checked, and an address after ten times as many over every username; a
successful login clears its pair. Attempts are reserved before the password is checked, so
attempts at once get no more checks; `manage.py login_unlock` clears a lockout early."""

from __future__ import annotations

import logging
import threading
import time
from io import StringIO
from unittest import mock

import pytest
from django.contrib.auth import forms as auth_forms
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings

from accounts.forms import LoginForm
from accounts.lockout import client_ip, login_attempt_reserve, login_failures_clear


def login(client: Client, username: str, password: str, url: str = "/login/") -> int:
    return client.post(url, {"username": username, "password": password}).status_code


def fail(client: Client, url: str, username: str, times: int, **extra: str) -> set[int]:
    return {
        client.post(url, {"username": username, "password": f"guess-{i}"}, **extra).status_code
        for i in range(times)
    }


@pytest.mark.django_db
def test_ten_wrong_passwords_lock_the_site_login_even_for_the_right_one(owner):
    client = Client()
    assert fail(client, "/login/", "alice", 10) == {200}

    response = client.post("/login/", {"username": "alice", "password": "pw-alice-123"})

    assert response.status_code == 429
    assert int(response["Retry-After"]) > 14 * 60
    page = response.content.decode()
    assert "Too many failed logins" in page and "Try again after" in page
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_nine_wrong_passwords_then_the_right_one_log_in_and_clear_the_count(owner):
    client = Client()
    assert fail(client, "/login/", "alice", 9) == {200}
    assert login(client, "alice", "pw-alice-123") == 302

    # The count started again: nine more wrong ones (from another address) do not lock.
    other = Client(REMOTE_ADDR="203.0.113.7")
    assert fail(other, "/login/", "alice", 9) == {200}
    assert login(other, "alice", "pw-alice-123") == 302


@pytest.mark.django_db
def test_a_pair_locked_from_an_attackers_address_does_not_lock_the_user_out_from_theirs(owner):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    fail(attacker, "/login/", "ALICE", 10)  # any case counts

    assert login(attacker, "alice", "pw-alice-123") == 429
    assert login(Client(REMOTE_ADDR="198.51.100.1"), "alice", "pw-alice-123") == 302


@pytest.mark.django_db
def test_one_user_mistyping_behind_a_shared_address_does_not_lock_out_the_others(owner, teammate):
    lab = "203.0.113.8"  # a whole lab behind one NAT
    assert fail(Client(REMOTE_ADDR=lab), "/login/", "alice", 10) == {200}

    assert login(Client(REMOTE_ADDR=lab), "alice", "pw-alice-123") == 429
    assert login(Client(REMOTE_ADDR=lab), "bob", "pw-bob-123") == 302


@pytest.mark.django_db
@override_settings(GPULAB_LOGIN_MAX_FAILURES=2)  # an address locks at 10 x 2 = 20
def test_an_address_that_guessed_many_usernames_is_refused_for_all(owner, teammate):
    client = Client(REMOTE_ADDR="203.0.113.8")
    statuses = {
        client.post("/login/", {"username": f"user{i}", "password": "guess"}).status_code
        for i in range(20)
    }
    assert statuses == {200}

    assert login(client, "bob", "pw-bob-123") == 429
    assert login(client, "nobody", "guess") == 429
    # bob himself, from his own address, is not locked out.
    assert login(Client(), "bob", "pw-bob-123") == 302


@pytest.mark.django_db
@override_settings(GPULAB_LOGIN_MAX_FAILURES=2)
def test_successful_logins_behind_one_address_never_add_up_to_its_limit(owner):
    for _ in range(25):  # more than the address's 20
        assert login(Client(REMOTE_ADDR="203.0.113.8"), "alice", "pw-alice-123") == 302


@pytest.mark.django_db
def test_a_locked_out_attempt_never_checks_the_password(owner):
    client = Client()
    fail(client, "/login/", "alice", 10)

    with mock.patch.object(auth_forms, "authenticate") as authenticate:
        response = client.post("/login/", {"username": "alice", "password": "pw-alice-123"})

    assert response.status_code == 429
    authenticate.assert_not_called()


@pytest.mark.django_db
def test_the_admin_login_locks_out_too(lab_admin):
    client = Client()
    assert fail(client, "/admin/login/", "root", 10) == {200}

    response = client.post(
        "/admin/login/", {"username": "root", "password": "pw-root-123", "next": "/admin/"}
    )

    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_failures_on_either_login_page_count_together(lab_admin):
    client = Client()
    fail(client, "/admin/login/", "root", 5)
    fail(client, "/login/", "root", 5)

    assert login(client, "root", "pw-root-123") == 429


@pytest.mark.django_db
def test_a_right_password_refused_by_the_admin_is_not_a_failure(owner):
    client = Client()
    for _ in range(12):  # a student's own password: no staff access, but not a guess
        response = client.post("/admin/login/", {"username": "alice", "password": "pw-alice-123"})
        assert response.status_code == 200

    assert login(client, "alice", "pw-alice-123") == 302


@pytest.mark.django_db
@override_settings(GPULAB_LOGIN_MAX_FAILURES=3)
def test_the_limit_is_a_setting(owner):
    client = Client()
    assert fail(client, "/login/", "alice", 3) == {200}

    assert login(client, "alice", "pw-alice-123") == 429


@pytest.mark.django_db
def test_failed_logins_are_logged_with_username_and_address_but_no_password(owner, caplog):
    with caplog.at_level(logging.WARNING, logger="accounts.login"):
        Client(REMOTE_ADDR="203.0.113.7").post(
            "/login/", {"username": "alice", "password": "secret-guess-42"}
        )

    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "'alice'" in logged and "203.0.113.7" in logged
    assert "secret-guess-42" not in logged


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "198.51.100.1", "10.0.0.1"),  # no trusted proxy: the header is the client's say
        (1, "198.51.100.1", "198.51.100.1"),
        (1, "6.6.6.6, 198.51.100.1", "198.51.100.1"),  # a forged entry on the left is ignored
        (2, "198.51.100.1, 10.0.0.2", "198.51.100.1"),
        (2, "198.51.100.1", "10.0.0.1"),  # fewer hops than proxies: the peer's address
    ],
)
def test_the_client_address_trusts_only_the_configured_proxies(proxies, forwarded, expected):
    request = RequestFactory().post(
        "/login/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forwarded
    )
    with override_settings(GPULAB_TRUSTED_PROXY_COUNT=proxies):
        assert client_ip(request) == expected


@pytest.mark.django_db
def test_with_the_cache_unreachable_logins_still_work_and_failures_are_not_fatal(
    owner, settings, caplog
):
    # Sessions live in the database; an outage of Redis must not answer 500 on the login
    # page or lock every user out. The lockout is skipped (and logged) meanwhile.
    from tests.outages import DEAD_CACHES

    settings.CACHES = DEAD_CACHES
    client = Client()
    assert fail(client, "/login/", "alice", 2) == {200}
    assert login(client, "alice", "pw-alice-123") == 302
    assert "the cache is unreachable" in caplog.text


def _guess_at_once(usernames: list[str], address: str) -> list[str]:
    """One login attempt per username, all at once from `address`; return the usernames
    whose password was checked."""
    checked: list[str] = []

    def slow_authenticate(request, username=None, **credentials):  # type: ignore[no-untyped-def]
        checked.append(username)
        time.sleep(0.2)  # keep the check in flight while the other attempts arrive
        return None

    def attempt(username: str) -> None:
        request = RequestFactory().post("/login/", REMOTE_ADDR=address)
        LoginForm(request, data={"username": username, "password": "guess"}).is_valid()

    with mock.patch.object(auth_forms, "authenticate", slow_authenticate):
        threads = [threading.Thread(target=attempt, args=(u,)) for u in usernames]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return checked


def test_attempts_at_once_get_no_more_password_checks_than_the_limit():
    try:
        checked = _guess_at_once(["dave"] * 40, "192.0.2.55")

        assert len(checked) == 10
        # The pair is locked: the next attempt is refused before any password check.
        assert login_attempt_reserve(username="dave", ip="192.0.2.55") is not None
    finally:
        login_failures_clear(ip="192.0.2.55")


@override_settings(GPULAB_LOGIN_MAX_FAILURES=1)  # an address locks at 10
def test_attempts_at_once_on_many_usernames_get_no_more_checks_than_the_address_limit():
    try:
        checked = _guess_at_once([f"user{i}" for i in range(40)], "192.0.2.56")

        assert len(checked) == 10
    finally:
        login_failures_clear(ip="192.0.2.56")


@pytest.mark.django_db
def test_login_unlock_clears_a_username_from_every_address_and_says_what(owner):
    fail(Client(REMOTE_ADDR="203.0.113.7"), "/login/", "alice", 10)
    fail(Client(REMOTE_ADDR="198.51.100.1"), "/login/", "alice", 3)
    out = StringIO()

    call_command("login_unlock", "ALICE", stdout=out)

    printed = out.getvalue()
    assert "username 'alice' from 203.0.113.7: 10 failed logins, locked until" in printed
    assert "username 'alice' from 198.51.100.1: 3 failed logins." in printed
    assert login(Client(REMOTE_ADDR="203.0.113.7"), "alice", "pw-alice-123") == 302


@pytest.mark.django_db
@override_settings(GPULAB_LOGIN_MAX_FAILURES=2)
def test_login_unlock_clears_an_address_and_the_usernames_tried_from_it(owner, teammate):
    client = Client(REMOTE_ADDR="203.0.113.8")
    fail(client, "/login/", "alice", 2)
    for i in range(18):
        client.post("/login/", {"username": f"user{i}", "password": "guess"})
    assert login(client, "bob", "pw-bob-123") == 429
    out = StringIO()

    call_command("login_unlock", "203.0.113.8", stdout=out)

    printed = out.getvalue()
    assert "address 203.0.113.8 (every username): 20 failed logins, locked until" in printed
    assert "username 'alice' from 203.0.113.8: 2 failed logins, locked until" in printed
    assert login(client, "bob", "pw-bob-123") == 302
    assert login(Client(REMOTE_ADDR="203.0.113.8"), "alice", "pw-alice-123") == 302


def test_login_unlock_says_when_there_is_nothing_to_clear():
    out = StringIO()

    call_command("login_unlock", "nobody", stdout=out)

    assert out.getvalue() == "Nothing to clear for 'nobody'.\n"
