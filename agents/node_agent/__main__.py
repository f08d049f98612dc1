"""`python -m agents.node_agent --url https://gpulab.example.edu --token-file /etc/gpulab/token`.

HTTP goes through the standard library (urllib), so a node needs only Python and pynvml.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .collector import NvmlCollector

logger = logging.getLogger("gpulab.node_agent")

HEARTBEAT_PATH = "/api/v1/agents/heartbeat/"
REQUEST_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class HttpResponse:
    status_code: int
    text: str


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirect as a bodyless GET carrying the token, to any host
    and even from https to http: refuse, so the 3xx itself is the answer."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class UrllibSession:
    """The one call the agent needs (`post`), with requests' argument names."""

    def __init__(self) -> None:
        self.opener = urllib.request.build_opener(_RefuseRedirects())

    def post(self, url: str, *, json: Any, headers: dict[str, str], timeout: float) -> HttpResponse:
        body = _dumps(json)
        request = urllib.request.Request(
            url,
            data=body,
            headers={**headers, "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with self.opener.open(request, timeout=timeout) as response:
                return HttpResponse(response.status, response.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                location = exc.headers.get("Location", "?")
                return HttpResponse(
                    exc.code, f"redirected to {location}: give the agent that URL (--url)"
                )
            return HttpResponse(exc.code, exc.read().decode(errors="replace"))


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload).encode()


def heartbeat_send(session: Any, *, url: str, token: str, payload: dict[str, Any]) -> bool:
    """POST one heartbeat; False (logged, never raised) when the control plane is away."""
    try:
        response = session.post(
            url.rstrip("/") + HEARTBEAT_PATH,
            json=payload,
            headers={"Authorization": f"Bearer {token}"},
            timeout=REQUEST_TIMEOUT_SECONDS,
        )
    except Exception as exc:  # any network failure: try again next interval
        logger.warning("Heartbeat failed: %s", exc)
        return False
    if response.status_code != 200:
        logger.warning("Heartbeat refused (%s): %s", response.status_code, response.text[:300])
        return False
    return True


def run(
    collector: NvmlCollector,
    session: Any,
    *,
    url: str,
    token: str,
    interval: float,
    beats: int | None = None,
    sleep: Any = time.sleep,
) -> int:
    """Send a heartbeat every `interval` seconds (forever, or `beats` times). Returns the
    number delivered. The next beat is scheduled from the start of this one, so a slow
    control plane does not stretch the interval the liveness sweep counts on."""
    delivered = 0
    sent = 0
    while beats is None or sent < beats:
        started = time.monotonic()
        try:
            payload = collector.collect()
        except Exception:  # a reading the agent did not foresee must not stop the beats
            logger.exception("Reading the GPUs failed; trying again next interval")
        else:
            if heartbeat_send(session, url=url, token=token, payload=payload):
                collector.delivered()
                delivered += 1
        sent += 1
        if beats is None or sent < beats:
            sleep(max(interval - (time.monotonic() - started), 0.0))
    return delivered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpulab-node-agent", description=__doc__)
    parser.add_argument("--url", required=True, help="The control plane, e.g. https://gpulab")
    parser.add_argument("--token-file", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--once", action="store_true", help="Send one heartbeat and exit.")
    parser.add_argument(
        "--simulated-gpus",
        type=int,
        default=0,
        help="Report N idle simulated GPUs instead of reading NVML (testing a setup "
        "on a machine without GPUs).",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        return _fail(f"cannot read the token file {args.token_file}: {exc.strerror}.")
    if args.simulated_gpus:
        from .simnvml import SimGpu, SimulatedNvml

        host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]
        nvml: Any = SimulatedNvml(
            [SimGpu(uuid=f"GPU-sim-{host}-{i}") for i in range(args.simulated_gpus)]
        )
    else:
        try:
            import pynvml  # only on a real node
        except ImportError as exc:
            return _fail(
                f"cannot import pynvml ({exc}): install nvidia-ml-py for this Python "
                f"({sys.executable} -m pip install nvidia-ml-py), or run the agent "
                "with a virtualenv's Python that has it (node_bootstrap --python)."
            )
        nvml = pynvml
    try:
        collector = NvmlCollector(nvml)
    except nvml.NVMLError as exc:  # no libnvidia-ml.so.1, or no driver loaded
        return _fail(
            f"NVML did not start ({exc}): install the NVIDIA driver, which provides "
            "libnvidia-ml.so.1, and check that nvidia-smi works."
        )
    delivered = run(
        collector,
        UrllibSession(),
        url=args.url,
        token=token,
        interval=args.interval,
        beats=1 if args.once else None,
    )
    return 0 if delivered or not args.once else 1


def _fail(message: str) -> int:
    """One line saying what to install or fix, instead of a traceback; exit status 1."""
    print(f"gpulab-node-agent: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
