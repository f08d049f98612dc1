"""Check the node agent on a real GPU: the real `python -m agents.node_agent` against pynvml.

What it does (on a GPU machine; nothing here runs in CI):
1. Starts a loopback HTTP server that stands in for the control plane's heartbeat endpoint and
   records every request body it receives.
2. Starts a GPU load (PyTorch matrix products, when PyTorch is installed) in a child process
   whose environment carries GPULAB_JOB_ID=4242, GPULAB_ATTEMPT=1 and GPULAB_PROGRESS_FILE,
   as the launcher sets them, so the collector's pid -> job mapping is exercised on real
   NVML process lists; the load writes its count of matrix products to the progress file,
   as a training script would write its step.
3. Runs the unmodified agent entry point three times with `--once` (idle, then twice under
   load, `--gap` seconds apart), each a real heartbeat over HTTP, and prints what NVML
   reported and the job's progress as the agent read it through /proc/<pid>/root.

Writes the received payloads to `--output` (default bench/results/nvml_real_gpu.json) so the
control plane's own heartbeat validation can be run over them on a machine with the
database (tests/agents/test_real_gpu_payload.py reads the committed copy).

Usage: python3 bench/nvml_real_gpu.py [--output FILE] [--load-seconds 25]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.node_agent.collector import PROGRESS_FILE  # noqa: E402  (standard library only)

RECEIVED: list[dict] = []

LOAD = """
import os, time, torch
progress = os.environ["GPULAB_PROGRESS_FILE"]
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
steps = 0
while time.time() < end:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    steps += 50
    with open(progress + ".tmp", "w") as out:  # rename: the agent never reads half a number
        out.write(f"{steps}\\n")
    os.replace(progress + ".tmp", progress)
"""


class Heartbeats(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        RECEIVED.append(
            {
                "path": self.path,
                "authorization": self.headers.get("Authorization", ""),
                "payload": json.loads(body),
            }
        )
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def beat(url: str, token_file: Path) -> int:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.node_agent",
            "--url",
            url,
            "--token-file",
            str(token_file),
            "--once",
        ],
        cwd=REPO,
        timeout=60,
    ).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "nvml_real_gpu.json"))
    parser.add_argument("--load-seconds", type=float, default=35.0)
    parser.add_argument("--gap", type=float, default=10.0, help="seconds between loaded beats")
    args = parser.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Heartbeats)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    token_file = Path(tempfile.mkdtemp()) / "token"
    token_file.write_text("real-gpu-check-token\n")

    codes = {"idle": beat(url, token_file)}
    progress_file = PROGRESS_FILE.format(job_id=4242, attempt=1)
    env = {
        **os.environ,
        "GPULAB_JOB_ID": "4242",
        "GPULAB_ATTEMPT": "1",
        "GPULAB_PROGRESS_FILE": progress_file,
    }
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.load_seconds)], env=env)
    time.sleep(12.0)  # CUDA context up, utilization sampled, a few progress writes
    codes["loaded"] = beat(url, token_file)
    loaded_at = time.monotonic()
    time.sleep(args.gap)
    codes["loaded again"] = beat(url, token_file)
    gap = time.monotonic() - loaded_at
    load.wait(timeout=args.load_seconds + 60)
    Path(progress_file).unlink(missing_ok=True)
    server.shutdown()

    labels = ("idle", "loaded", "loaded again")
    for label, received in zip(labels, RECEIVED, strict=False):
        payload = received["payload"]
        print(f"== {label}: POST {received['path']} ({received['authorization'][:6]}...)")
        print(f"   driver {payload['driver_version']}, CUDA {payload['cuda_version']}")
        for gpu in payload["gpus"]:
            procs = [
                (p["pid"], p["job_id"], p["attempt"], p["used_memory_mb"]) for p in gpu["processes"]
            ]
            memory = f"{gpu['memory_used_mb']}/{gpu['memory_total_mb']} MiB"
            print(f"   gpu {gpu['index']} {gpu['name']} {gpu['uuid']}")
            print(
                f"     util {gpu['utilization_pct']}%, mem {memory}, {gpu['temperature_c']} C, "
                f"{gpu['power_w']} W, ecc {gpu['ecc_uncorrected']}, xid {gpu['xid_errors']}"
            )
            print(f"     processes (pid, job, attempt, MiB): {procs}")
        print(f"   jobs' progress: {payload.get('jobs')}")
    readings = [
        entry["progress"]
        for received in RECEIVED[1:]
        for entry in received["payload"].get("jobs", [])
        if entry["job_id"] == 4242
    ]
    rate = (readings[1] - readings[0]) / gap if len(readings) == 2 else None
    print(f"progress {readings} over {gap:.1f} s: {rate} matrix products/s")
    result = {
        "exit_codes": codes,
        "heartbeats": RECEIVED,
        "python": sys.version,
        "progress_rate_per_second": rate,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0 if set(codes.values()) == {0} and len(RECEIVED) == 3 and rate else 1


if __name__ == "__main__":
    raise SystemExit(main())
