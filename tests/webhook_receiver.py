"""A real webhook receiver on loopback, for the tests of what gpulab posts to chats
(agents/webhooks.py, jobs/webhooks.py): no stand-in for `requests`, the body goes over
HTTP and is read back as the receiver got it."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class Receiver:
    """A webhook receiver on loopback that records what it was sent (the JSON bodies, and
    the raw bytes, to look for what must never be sent); answers `status`."""

    def __init__(self, status: int = 200, path: str = "/hooks/lab") -> None:
        self.status = status
        self.received: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = self.rfile.read(length)
                receiver.raw.append(body)
                receiver.received.append(json.loads(body))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, key: str = "node") -> list[tuple[str, Any]]:
        """(event, what it is about) for each body received, oldest first."""
        return [(body["event"], body[key]) for body in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
