"""Account pages: a revoke reached by GET (the login redirect after an expired session)
revokes nothing, and the password form's help and errors carry the ids its inputs name."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from accounts.models import ApiToken
from accounts.services import api_token_create


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_revoke_sent_after_the_session_ended_lands_on_the_tokens_and_revokes_nothing(owner):
    token, _ = api_token_create(user=owner, name="laptop")
    client = Client()  # the session has expired
    to_login = client.post(f"/account/tokens/{token.pk}/revoke/")
    assert to_login.status_code == 302 and to_login.url.startswith("/login/")
    logged = client.post(to_login.url, {"username": "alice", "password": "pw-alice-123"})
    assert logged.url == f"/account/tokens/{token.pk}/revoke/"
    landed = client.get(logged.url, follow=True)
    assert landed.status_code == 200
    assert landed.redirect_chain == [("/account/tokens/", 302)]
    assert "Nothing was revoked" in landed.content.decode()
    assert ApiToken.objects.get(pk=token.pk).is_active


@pytest.mark.django_db
def test_a_post_still_revokes(owner):
    token, _ = api_token_create(user=owner, name="laptop")
    assert logged_in(owner).post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert not ApiToken.objects.get(pk=token.pk).is_active


@pytest.mark.django_db
def test_password_help_and_errors_carry_the_ids_the_inputs_point_at(owner):
    response = logged_in(owner).post(
        "/account/password/",
        {"old_password": "wrong", "new_password1": "x", "new_password2": "y"},
    )
    page = response.content.decode()
    pointed = set()
    for described in re.findall(r'aria-describedby="([^"]*)"', page):
        pointed.update(described.split())
    assert {"id_old_password_error", "id_new_password1_helptext"} <= pointed
    for element_id in pointed:
        assert f'id="{element_id}"' in page, element_id
