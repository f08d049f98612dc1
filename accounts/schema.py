"""How the OpenAPI schema describes API-token authentication (drf-spectacular).

Loaded from AccountsConfig.ready(): without it drf-spectacular cannot describe
ApiTokenAuthentication, warns "could not resolve authenticator" and documents only
cookie (session) auth.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        # apiKey, not http/bearer: the header's keyword may be "Token" as well as "Bearer".
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                'An API token from the "API tokens" page, sent as "Token <key>" or "Bearer <key>".'
            ),
        }
