"""`python -m scheduler.sim ...`: the simulator without Django (same options as
`manage.py simulate`)."""

from __future__ import annotations

import sys

from scheduler.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
