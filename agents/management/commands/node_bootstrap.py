"""Install and start the node agent on NODE over SSH (its host key must be approved)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.services import node_agent_bootstrap
from cluster.models import Node
from config.errors import ApplicationError


class Command(BaseCommand):
    help = "Copy the node agent to NODE over SSH, give it a new token and (re)start it."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("node")
        parser.add_argument(
            "--url", required=True, help="The control plane as the node reaches it."
        )
        parser.add_argument("--python", default="python3", help="Python on the node.")

    def handle(self, *args, node: str, url: str, python: str, **options) -> None:  # type: ignore[no-untyped-def]
        found = Node.objects.filter(name=node).first()
        if found is None:
            raise CommandError(f"No node named {node!r}.")
        try:
            pid = node_agent_bootstrap(node_id=found.pk, control_plane_url=url, python=python)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Agent running on {node} (pid {pid}), reporting to {url}.")
