"""The demo on SQLite: web writes and the embedded loop at once never fail with
"database is locked" (SQLite's DEFERRED transactions did, at once, without waiting)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.scheduler import demo_sqlite_load

ROOT = Path(__file__).resolve().parents[2]


def test_submits_and_cancels_during_rounds_never_meet_a_locked_database(tmp_path):
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "GPULAB_SCHEDULER_MODE": "embedded",
    }
    run = subprocess.run(
        [sys.executable, "-m", "tests.scheduler.demo_sqlite_load"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])

    assert result["errors"] == []
    jobs = demo_sqlite_load.WRITERS * demo_sqlite_load.JOBS_PER_WRITER
    assert result["cancelled"] == jobs
    assert result["rounds"] >= demo_sqlite_load.LOOP_PASSES_AT_LEAST
