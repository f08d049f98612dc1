"""The OpenAPI schema documents token authentication, not only the session cookie."""

from __future__ import annotations

import json

import pytest
from django.test import Client


@pytest.fixture
def schema(owner) -> dict:
    client = Client()
    client.force_login(owner)
    return json.loads(client.get("/api/schema/", HTTP_ACCEPT="application/json").content)


@pytest.mark.django_db
def test_the_schema_describes_api_tokens_and_node_agent_tokens(schema):
    schemes = schema["components"]["securitySchemes"]

    assert schemes["tokenAuth"]["type"] == "apiKey"
    assert (schemes["tokenAuth"]["in"], schemes["tokenAuth"]["name"]) == ("header", "Authorization")
    assert "Token <key>" in schemes["tokenAuth"]["description"]
    assert "Bearer <key>" in schemes["tokenAuth"]["description"]
    assert (schemes["nodeAgentToken"]["type"], schemes["nodeAgentToken"]["scheme"]) == (
        "http", "bearer"
    )  # fmt: skip


@pytest.mark.django_db
def test_submitting_a_job_lists_the_token_scheme(schema):
    security = schema["paths"]["/api/v1/jobs/"]["post"]["security"]

    assert {"tokenAuth": []} in security and {"cookieAuth": []} in security


@pytest.mark.django_db
def test_the_heartbeat_endpoint_lists_only_the_node_token(schema):
    security = schema["paths"]["/api/v1/agents/heartbeat/"]["post"]["security"]

    assert security == [{"nodeAgentToken": []}]


def test_generating_the_schema_resolves_every_authenticator():
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator

    GENERATOR_STATS.reset()  # warnings are counted once per process otherwise
    with GENERATOR_STATS.silence():
        SchemaGenerator().get_schema(request=None, public=True)

    unresolved = [w for w in GENERATOR_STATS._warn_cache if "could not resolve authenticator" in w]
    assert unresolved == []
