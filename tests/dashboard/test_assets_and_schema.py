"""plotly.js comes from the installed plotly package (never a CDN); the API schema lists
every dashboard endpoint."""

from __future__ import annotations

from pathlib import Path

import plotly
import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

from dashboard.finders import PLOTLY_JS_STATIC_PATH


def test_the_finder_exposes_exactly_the_packaged_plotly_js():
    found = finders.find(PLOTLY_JS_STATIC_PATH)
    assert found == str(Path(plotly.__file__).parent / "package_data" / "plotly.min.js")
    assert finders.find("vendor/widgetbundle.js") is None  # nothing else of the package


@pytest.mark.django_db
def test_plotly_js_is_served_locally_with_the_package_version(owner):
    client = Client()
    client.force_login(owner)
    page = client.get("/queue/").content.decode()
    assert '<script src="/static/vendor/plotly.min.js" defer>' in page
    assert "cdn" not in page.lower()
    response = client.get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)[:400].decode()
    assert "plotly.js" in body.lower()


def test_collectstatic_copies_plotly_js_for_production(tmp_path, settings):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    copied = tmp_path / "vendor" / "plotly.min.js"
    assert copied.exists() and copied.stat().st_size > 1_000_000
    assert not (tmp_path / "vendor" / "datasets").exists()


@pytest.mark.django_db
def test_the_openapi_schema_documents_the_dashboard_endpoints(owner):
    client = Client()
    client.force_login(owner)
    schema = client.get("/api/schema/?format=json").json()
    for path in ("queue", "cluster", "utilization", "fairness", "usage"):
        operation = schema["paths"][f"/api/v1/{path}/"]["get"]
        assert operation["summary"], path
        assert operation["responses"]["200"]["content"], path
