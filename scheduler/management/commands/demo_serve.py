"""Serve the app with the embedded scheduler loop (the demo; no Redis or Celery needed)."""

from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Run the web server with scheduling rounds and simulated agents in-process."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args, addrport: str, **options) -> None:  # type: ignore[no-untyped-def]
        if settings.GPULAB_SCHEDULER_MODE != "embedded":
            raise CommandError(
                "demo_serve needs GPULAB_SCHEDULER_MODE=embedded (the local settings)."
            )
        from scheduler import embedded

        embedded.start()
        self.stdout.write("Scheduler loop and simulated agents running in this process.")
        # No autoreloader: it would fork a second process with a second scheduler loop.
        call_command("runserver", addrport, use_reloader=False)
