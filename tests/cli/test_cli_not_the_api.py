"""A 200 that is not the API's answer (a proxy's page, a stub, another service) is said so
(NOT_THE_API), by every call, never a traceback: a throwaway server answers each body."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cli.__main__ import main
from cli.client import NOT_THE_API, ApiError, Client
from tests.cli.conftest import Terminal

BODIES = [b"{}", b"[]", b'"ok"', b""]

CALLS: dict[str, Callable[[Client], Any]] = {
    "submit": lambda client: client.submit({"image": "img:1", "command": ["true"]}),
    "job": lambda client: client.job(1),
    "cancel": lambda client: client.cancel(1),
    "cancel_array": lambda client: client.cancel_array(1),
    "logs": lambda client: client.logs(1, "stdout"),
    "jobs": lambda client: list(client.jobs()),
    "quotas": lambda client: client.quotas(),
}


@pytest.fixture
def answering() -> Iterator[Callable[[bytes], str]]:
    """answering(body) -> the URL of a server that answers every request 200 with `body`."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(body: bytes) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("call", list(CALLS))
def test_an_answer_that_is_not_the_apis_is_said_so(answering, body, call) -> None:  # type: ignore[no-untyped-def]
    client = Client(answering(body), "token")

    with pytest.raises(ApiError) as refused:
        CALLS[call](client)

    assert refused.value.status == NOT_THE_API
    assert "other than the gpulab API" in refused.value.message


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "1"],
        ["cancel", "1"],
        ["cancel", "--array", "1"],
        ["logs", "1"],
        ["submit", "img:1", "true"],
    ],
)
def test_the_command_says_so_and_exits_1(answering, monkeypatch, tmp_path, capsys, argv) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPULAB_TOKEN", "token")

    assert main(["--url", answering(b"{}"), *argv], out=Terminal()) == 1
    assert "other than the gpulab API" in capsys.readouterr().err
