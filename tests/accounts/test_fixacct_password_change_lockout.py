"""The old password a password-change page asks for is a password guess: someone holding
a session (a borrowed laptop) gets no more guesses there than on the login page. Both
pages (/account/password/ and the Django admin's) count it against the session's
username from the client's address, with the login's counters (accounts.lockout)."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import User

NEW = "a-much-longer-secret-9"


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change(client: Client, old_password: str, url: str = "/account/password/") -> int:
    body = {"old_password": old_password, "new_password1": NEW, "new_password2": NEW}
    return client.post(url, body).status_code


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "who"),
    [("/account/password/", "owner"), ("/admin/password_change/", "lab_admin")],
)
def test_ten_wrong_old_passwords_lock_the_page_even_for_the_right_one(url, who, request):
    user = request.getfixturevalue(who)
    right = {"owner": "pw-alice-123", "lab_admin": "pw-root-123"}[who]
    client = logged_in(user)
    assert {change(client, f"guess-{i}", url) for i in range(10)} == {200}

    response = client.post(url, {"old_password": right, "new_password1": NEW, "new_password2": NEW})

    assert response.status_code == 429
    assert int(response["Retry-After"]) > 14 * 60
    assert "Too many failed logins" in response.content.decode()
    user.refresh_from_db()
    assert user.check_password(right)  # not changed


@pytest.mark.django_db
def test_guesses_on_the_password_page_and_the_login_page_count_together(owner):
    session = logged_in(owner)
    assert {change(session, f"guess-{i}") for i in range(5)} == {200}
    login = Client()
    for i in range(5):
        login.post("/login/", {"username": "alice", "password": f"other-{i}"})

    assert change(session, "pw-alice-123") == 429
    refused = login.post("/login/", {"username": "alice", "password": "pw-alice-123"})
    assert refused.status_code == 429


@pytest.mark.django_db
def test_the_right_old_password_clears_the_count(owner):
    client = logged_in(owner)
    assert {change(client, f"guess-{i}") for i in range(9)} == {200}
    assert change(client, "pw-alice-123") == 302

    # The count started again: nine more wrong ones are form errors, not a lockout.
    assert {change(client, f"again-{i}") for i in range(9)} == {200}
    owner.refresh_from_db()
    assert owner.check_password(NEW)


@pytest.mark.django_db
def test_a_lockout_from_another_address_does_not_lock_the_users_own_page(owner):
    attacker = logged_in(owner)  # a stolen session used from elsewhere
    for i in range(10):
        attacker.post(
            "/account/password/",
            {"old_password": f"guess-{i}", "new_password1": NEW, "new_password2": NEW},
            REMOTE_ADDR="203.0.113.7",
        )

    assert change(logged_in(owner), "pw-alice-123") == 302


@pytest.mark.django_db
def test_the_admins_password_page_still_works_and_is_for_staff_only(lab_admin, owner):
    admin_client = logged_in(lab_admin)
    page = admin_client.get("/admin/password_change/")
    assert page.status_code == 200 and 'name="old_password"' in page.content.decode()

    assert change(admin_client, "pw-root-123", "/admin/password_change/") == 302
    lab_admin.refresh_from_db()
    assert lab_admin.check_password(NEW)
    student = logged_in(owner).get("/admin/password_change/")
    assert student.status_code == 302 and student.url.startswith("/admin/login/")
