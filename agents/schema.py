"""How the OpenAPI schema describes node-agent authentication (drf-spectacular).

Loaded from AgentsConfig.ready(), so the schema documents the heartbeat endpoint's
per-node token instead of warning "could not resolve authenticator".
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class NodeAgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agents.api.views.NodeAgentAuthentication"
    name = "nodeAgentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A node's agent token (from manage.py node_bootstrap or node_agent_token), "
                'sent as "Bearer <node token>". For node agents only.'
            ),
        }
