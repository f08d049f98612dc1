"""`manage.py simulate`: replay a job trace through the scheduler (no database needed).

A thin wrapper: the options are `scheduler.sim.cli.add_arguments` (shared with
`python -m scheduler.sim`) and the work is `scheduler.sim.cli.run`.
"""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from scheduler.sim.cli import UsageError, add_arguments, run, stalled_runs, stuck_policies
from scheduler.sim.engine import ReplayError
from scheduler.sim.traces import TraceError


class Command(BaseCommand):
    help = "Replay a job trace through gpulab's scheduling policies (trace-driven simulator)."
    # Pure computation: no system checks or migration checks, so it runs without a database.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_arguments(parser)

    def handle(self, *args: object, **options: object) -> None:
        namespace = argparse.Namespace(**options)
        try:
            document = run(namespace, out=self.stdout)
        except (UsageError, TraceError) as exc:
            raise CommandError(str(exc)) from exc
        except ReplayError as exc:  # CommandError's status is 1: the inputs ran, badly
            raise CommandError(str(exc)) from exc
        problems = stalled_runs(document)
        stuck = stuck_policies(document)
        if stuck:
            problems.append(f"{', '.join(stuck)} left jobs that never ran")
        if problems:
            raise CommandError("; ".join(problems))
