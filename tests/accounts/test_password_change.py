"""Everyone changes their own password at /account/password/."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import User


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_student_changes_their_own_password_and_stays_logged_in(owner):
    client = logged_in(owner)
    assert client.get("/account/password/").status_code == 200

    response = client.post(
        "/account/password/",
        {
            "old_password": "pw-alice-123",
            "new_password1": "a-much-longer-secret-9",
            "new_password2": "a-much-longer-secret-9",
        },
    )

    assert response.status_code == 302 and response.url == "/account/password/done/"
    owner.refresh_from_db()
    assert owner.check_password("a-much-longer-secret-9")
    assert client.get("/account/password/done/").status_code == 200
    assert client.get("/jobs/").status_code == 200  # the session survived the change
    fresh = Client()
    old = fresh.post("/login/", {"username": "alice", "password": "pw-alice-123"})
    assert old.status_code == 200
    new = fresh.post("/login/", {"username": "alice", "password": "a-much-longer-secret-9"})
    assert new.status_code == 302


@pytest.mark.django_db
def test_a_wrong_old_password_is_a_form_error(owner):
    response = logged_in(owner).post(
        "/account/password/",
        {
            "old_password": "not-it",
            "new_password1": "a-much-longer-secret-9",
            "new_password2": "a-much-longer-secret-9",
        },
    )

    assert response.status_code == 200
    assert "old password was entered incorrectly" in response.content.decode()
    owner.refresh_from_db()
    assert owner.check_password("pw-alice-123")


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get("/account/password/")

    assert response.status_code == 302
    assert response.url.startswith("/login/?next=/account/password/")


@pytest.mark.django_db
def test_the_nav_links_to_the_password_page(owner):
    page = logged_in(owner).get("/jobs/").content.decode()

    assert 'href="/account/password/"' in page
