"""Dashboard pages keep their auto-refreshed regions fit for a refresh: every region is
rendered whatever it holds, one element in every state, and a re-shown form error is
rendered again by every refresh."""

from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse

from cluster.models import Node
from dashboard.views.cluster import DRAIN_ERROR_SECONDS
from tests.dashboard.helpers import logged_in

pytestmark = pytest.mark.django_db


def test_the_fairness_page_without_usage_has_its_charts_and_table_regions(owner):
    html = logged_in(owner).get("/fairness/").content.decode()
    assert "No group used GPUs" in html and "Nobody used GPUs" in html
    for chart in ("fairness-groups-chart", "fairness-users-chart"):
        assert f'data-refresh-id="{chart}"' in html
    assert "/static/vendor/plotly.min.js" in html
    # The same element with or without rows: a refresh swaps its content, not its kind.
    for table in ("fairness-groups-table", "fairness-users-table"):
        assert f'<div data-refresh-id="{table}">' in html


def test_a_refused_drain_is_shown_by_every_render_until_the_admin_posts_again(
    lab_admin, small_cluster
):
    node = Node.objects.get(name="a0")
    client = logged_in(lab_admin)
    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "   "})

    # The page after the redirect and each auto-refresh after it (or one that came between
    # the post and its redirect): the error and what was typed, every time.
    for _ in range(3):
        page = client.get("/cluster/", headers={"X-Refresh": "1"}).content.decode()
        field = re.search(rf'<input id="drain-reason-{node.pk}"[^>]*>', page)[0]
        assert 'aria-invalid="true"' in field and 'value="   "' in field
        assert f'id="drain-reason-{node.pk}-error"' in page

    client.post(reverse("dashboard:node-undrain", args=[node.pk]))  # the admin moved on
    assert f'id="drain-reason-{node.pk}-error"' not in client.get("/cluster/").content.decode()


def test_a_refused_drain_is_forgotten_after_ten_minutes(lab_admin, small_cluster, monkeypatch):
    node = Node.objects.get(name="a0")
    client = logged_in(lab_admin)
    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "   "})
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + DRAIN_ERROR_SECONDS + 1)

    assert f'id="drain-reason-{node.pk}-error"' not in client.get("/cluster/").content.decode()
