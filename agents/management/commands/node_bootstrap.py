"""Install and start the node agent on NODE over SSH (its host key must be approved)."""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from agents.services import control_plane_url_check, node_agent_bootstrap
from cluster.models import Node
from config.errors import ApplicationError, ValidationFailed


def _control_plane_url(value: str) -> str:
    # Checked before anything is made or touched: argparse names --url in the error.
    try:
        return control_plane_url_check(value)
    except ValidationFailed as exc:
        raise argparse.ArgumentTypeError(" ".join(exc.errors["control_plane_url"])) from exc


class Command(BaseCommand):
    help = "Copy the node agent to NODE over SSH, give it a new token and (re)start it."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("node")
        parser.add_argument(
            "--url",
            required=True,
            type=_control_plane_url,
            help="The control plane as the node reaches it: http(s)://host[:port][/path].",
        )
        parser.add_argument("--python", default="python3", help="Python on the node.")

    def handle(self, *args, node: str, url: str, python: str, **options) -> None:  # type: ignore[no-untyped-def]
        found = Node.objects.filter(name=node).first()
        if found is None:
            raise CommandError(f"No node named {node!r}.")
        try:
            pid = node_agent_bootstrap(
                node_id=found.pk, control_plane_url=url, python=python, progress=self.stdout.write
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Agent running on {node} (pid {pid}), reporting to {url}.")
