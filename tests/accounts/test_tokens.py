"""API tokens: created on a page (shown once), stored hashed, revocable only by their owner."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services import api_token_create, token_digest


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_token_is_shown_once_and_only_its_digest_is_stored(owner):
    response = logged_in(owner).post("/account/tokens/", {"name": "laptop"})
    page = response.content.decode()
    token = ApiToken.objects.get(user=owner)
    key = page.split('<pre class="key">')[1].split("</pre>")[0]
    assert token.digest == token_digest(key) and key not in token.digest
    assert key not in logged_in(owner).get("/account/tokens/").content.decode()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/jobs/").status_code == 200


@pytest.mark.django_db
def test_a_token_needs_a_name(owner):
    response = logged_in(owner).post("/account/tokens/", {"name": "  "})
    assert response.status_code == 400
    assert "Give the token a name" in response.content.decode()
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_the_owner_revokes_a_token_and_it_stops_working(owner):
    token, key = api_token_create(user=owner, name="ci")
    assert logged_in(owner).post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/jobs/").status_code == 401


@pytest.mark.django_db
def test_another_user_can_neither_list_nor_revoke_my_token(owner, outsider):
    token, _ = api_token_create(user=owner, name="mine")
    other = logged_in(outsider)
    assert "mine" not in other.get("/account/tokens/").content.decode()
    assert other.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.is_active


@pytest.mark.django_db
def test_the_admin_revokes_tokens_but_cannot_add_move_or_unrevoke_them(owner, lab_admin):
    token, key = api_token_create(user=owner, name="laptop")
    client = Client()
    client.force_login(lab_admin)

    assert client.get("/admin/accounts/apitoken/add/").status_code == 403
    change_page = client.get(f"/admin/accounts/apitoken/{token.pk}/change/").content.decode()
    assert 'name="user"' not in change_page and 'name="revoked_at"' not in change_page
    client.post("/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/jobs/").status_code == 401


@pytest.mark.django_db
def test_the_tokens_page_names_only_what_tokens_work_with(owner):
    page = logged_in(owner).get("/account/tokens/").content.decode()

    assert "Use a token with the REST API" in page
    # The command line it names exists, with the login command the page shows.
    assert "gpulab login --url http://testserver" in page
    assert (Path(__file__).resolve().parents[2] / "cli" / "__main__.py").exists()
