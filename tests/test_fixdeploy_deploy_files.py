"""The image and compose file: how the web server runs, and what stays out of the image."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from django.conf import settings
from gunicorn.config import Config

from agents.logs import LOG_READ_STEP_SECONDS, LOG_READ_STEPS

ROOT = Path(settings.BASE_DIR)


def _dockerfile_cmd() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    return json.loads(line.removeprefix("CMD "))


def _gunicorn(argv: list[str]) -> Config:
    """`argv` as gunicorn itself parses it (an unknown option or bad value fails here)."""
    assert argv[0] == "gunicorn"
    config = Config()
    parsed = config.parser().parse_args(argv[1:])
    for name, value in vars(parsed).items():
        if name != "args" and value is not None:
            config.set(name.lower(), value)
    return config


def test_compose_runs_the_images_web_command() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["web"]["command"] == _dockerfile_cmd()


def test_a_log_read_waiting_on_a_hung_node_holds_a_thread_not_a_worker() -> None:
    config = _gunicorn(_dockerfile_cmd())
    # Sync workers: one request blocked on SSH is a whole worker, killed at --timeout.
    assert config.worker_class_str == "gthread"
    assert config.threads >= 4
    # The worker's own liveness limit, comfortably above the longest web log read.
    assert config.timeout >= 2 * LOG_READ_STEP_SECONDS * LOG_READ_STEPS


def test_secrets_and_local_state_stay_out_of_the_image() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    # .env: compose reads POSTGRES_PASSWORD from it (README), next to the build context.
    assert {".env", ".envs", ".venv", ".git", "**/*.sqlite3", "staticfiles", "artifacts"} <= (
        ignored
    )
    assert {".pytest_cache", ".ruff_cache", ".hypothesis"} <= ignored
