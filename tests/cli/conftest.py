"""What the command-line tests share: a captured terminal, and the CLI run as a user
against the live server."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from accounts.models import User
from accounts.services import api_token_create
from cli.__main__ import main


class Terminal(io.StringIO):
    """Captured output that says it is, or is not, a terminal."""

    def __init__(self, tty: bool = False) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def as_user(live_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """as_user(user) -> run(*argv) -> (exit status, stdout, stderr) as that user."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("GPULAB_URL", live_server.url)

    def for_user(user: User):  # type: ignore[no-untyped-def]
        _, key = api_token_create(user=user, name="cli")

        def run(*argv: str) -> tuple[int, str]:
            monkeypatch.setenv("GPULAB_TOKEN", key)
            out = Terminal()
            status = main(list(argv), out=out)
            return status, out.getvalue()

        return run

    return for_user
