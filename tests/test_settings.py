"""Settings parse the environment strictly, and CI never silently falls back to SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import base

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("raw", "expected"), [("true", True), ("0", False), ("YES", True), ("", False)]
)
def test_env_bool_reads_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("GPULAB_X", raw)
    assert base.env_bool("GPULAB_X", False) is expected


@pytest.mark.parametrize("raw", ["maybe", "2", "tru"])
def test_env_bool_refuses_anything_else(monkeypatch, raw):
    monkeypatch.setenv("GPULAB_X", raw)
    with pytest.raises(ImproperlyConfigured, match="GPULAB_X"):
        base.env_bool("GPULAB_X", False)


def test_env_int_refuses_text_and_values_outside_its_range(monkeypatch):
    monkeypatch.setenv("GPULAB_N", "ten")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        base.env_int("GPULAB_N", 1)
    monkeypatch.setenv("GPULAB_N", "-1")
    with pytest.raises(ImproperlyConfigured, match="at least 0"):
        base.env_int("GPULAB_N", 1, minimum=0)
    monkeypatch.setenv("GPULAB_N", "3601")
    with pytest.raises(ImproperlyConfigured, match="at most 3600"):
        base.env_int("GPULAB_N", 1, maximum=3600)


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("GPULAB_SECRET_FILE", str(secret))
    assert base.env_secret("GPULAB_SECRET") == "s3cret"


def _import_settings(module: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_with_ci_true_an_unreachable_postgres_fails_loudly():
    result = _import_settings(
        "config.settings.test", CI="true", DATABASE_URL="postgres://postgres@127.0.0.1:1/gpulab"
    )
    assert result.returncode != 0
    assert "CI=true and PostgreSQL is unreachable" in result.stderr


def test_without_ci_an_unreachable_postgres_falls_back_with_a_warning():
    result = _import_settings(
        "config.settings.test", CI="false", DATABASE_URL="postgres://postgres@127.0.0.1:1/gpulab"
    )
    assert result.returncode == 0, result.stderr
    assert "falling back to SQLite" in result.stderr


def test_production_demands_a_secret_key():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_SECRET_KEY")}
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings.production"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_a_malformed_boolean_stops_startup():
    result = _import_settings("config.settings.base", DJANGO_DEBUG="perhaps")
    assert result.returncode != 0
    assert "DJANGO_DEBUG='perhaps' is not a boolean" in result.stderr


@pytest.mark.parametrize("raw", ["bogus", "120", "0/min", "10/fortnight"])
def test_env_rate_refuses_what_drf_could_not_parse(monkeypatch, raw):
    monkeypatch.setenv("GPULAB_RATE", raw)
    with pytest.raises(ImproperlyConfigured, match="GPULAB_RATE"):
        base.env_rate("GPULAB_RATE", "1/min")


@pytest.mark.parametrize("raw", ["120/min", "5/s", "30/minute", "1000/day"])
def test_env_rate_takes_drfs_rates(monkeypatch, raw):
    monkeypatch.setenv("GPULAB_RATE", raw)
    assert base.env_rate("GPULAB_RATE", "1/min") == raw


@pytest.mark.parametrize("key", ["change-me-to-a-long-random-string", "short-but-not-insecure"])
def test_production_refuses_the_example_or_a_short_secret_key(key):
    result = _import_settings("config.settings.production", DJANGO_SECRET_KEY=key)
    assert result.returncode != 0
    assert "at least 50 characters" in result.stderr


def test_a_webhook_url_that_is_not_http_stops_startup():
    result = _import_settings("config.settings.base", GPULAB_ADMIN_WEBHOOK_URL="file:///etc/passwd")
    assert result.returncode != 0
    assert "GPULAB_ADMIN_WEBHOOK_URL must be an http(s) URL" in result.stderr


def test_a_site_url_without_a_scheme_stops_startup():
    # It is put in front of every link in mail and chat posts: "gpulab.lab" would break them.
    result = _import_settings("config.settings.base", GPULAB_SITE_URL="gpulab.lab.example.edu")
    assert result.returncode != 0
    assert "GPULAB_SITE_URL must be an http(s) URL" in result.stderr
    fine = _import_settings("config.settings.base", GPULAB_SITE_URL="https://gpulab.example.edu")
    assert fine.returncode == 0, fine.stderr
