"""Create a node's agent token (revoking older ones) and print it once."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.heartbeats import node_agent_token_create
from cluster.models import Node


class Command(BaseCommand):
    help = "Print a new heartbeat token for NODE's agent (older tokens stop working)."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("node")

    def handle(self, *args, node: str, **options) -> None:  # type: ignore[no-untyped-def]
        found = Node.objects.filter(name=node).first()
        if found is None:
            raise CommandError(f"No node named {node!r}.")
        _, key = node_agent_token_create(node_id=found.pk)
        self.stdout.write(key)
