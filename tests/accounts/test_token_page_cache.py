"""The tokens page shows a new key once, so no browser or proxy cache may keep the page."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_the_tokens_page_is_never_cached(owner, method):
    client = Client()
    client.force_login(owner)

    response = getattr(client, method)("/account/tokens/", {"name": "laptop"})

    assert response.status_code == 200
    cache_control = response.headers.get("Cache-Control", "")
    for directive in ("no-cache", "no-store", "must-revalidate", "private"):
        assert directive in cache_control, f"{directive!r} missing from {cache_control!r}"
