"""Dashboard pages keep their auto-refreshed regions fit for a refresh: every region is
rendered whatever it holds, one element in every state, and a re-shown form error is
marked to be left alone (gpulab.js: `[data-keep]`)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from cluster.models import Node
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


def test_a_refused_drain_reason_is_kept_from_refreshes_and_a_plain_one_is_not(
    lab_admin, small_cluster
):
    node, other = Node.objects.get(name="a0"), Node.objects.get(name="a1")
    client = logged_in(lab_admin)
    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "   "})

    page = client.get("/cluster/").content.decode()

    assert "data-keep" in re.search(rf'<input id="drain-reason-{node.pk}"[^>]*>', page)[0]
    assert "data-keep" not in re.search(rf'<input id="drain-reason-{other.pk}"[^>]*>', page)[0]
