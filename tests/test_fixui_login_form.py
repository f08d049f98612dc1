"""The login page after a refused attempt: the user name stays typed, and the error is tied
to both fields (aria-invalid, aria-describedby), since it cannot say which one was wrong."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from accounts.lockout import login_failures_clear

USERNAME = "fixui-nobody"


@pytest.fixture(autouse=True)
def _no_lockout_left():  # type: ignore[no-untyped-def]
    yield
    login_failures_clear(username=USERNAME)


def _input(page: str, name: str) -> str:
    return re.search(rf'<input id="id_{name}"[^>]*>', page).group(0)


@pytest.mark.django_db
def test_a_wrong_password_shows_the_form_again_with_the_user_name_and_the_error_tied_to_it():
    response = Client().post("/login/", {"username": USERNAME, "password": "wrong"})

    assert response.status_code == 200
    page = response.content.decode()
    error = re.search(r'id="login-error"[^>]*>(.*?)</div>', page, re.DOTALL).group(1)
    assert "Wrong user name or password." in error
    username, password = _input(page, "username"), _input(page, "password")
    assert f'value="{USERNAME}"' in username
    assert "value=" not in password  # a password is never sent back
    for field in (username, password):
        assert 'aria-invalid="true"' in field and 'aria-describedby="login-error"' in field
    # The cursor goes where the retyping starts.
    assert "autofocus" in password and "autofocus" not in username


@pytest.mark.django_db
def test_the_first_visit_has_an_empty_form_without_errors():
    page = Client().get("/login/").content.decode()

    username = _input(page, "username")
    assert "value=" not in username and "autofocus" in username
    assert "aria-invalid" not in page and 'id="login-error"' not in page
