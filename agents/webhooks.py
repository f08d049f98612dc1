"""Node events posted to the lab's chat (Slack, Mattermost, or any JSON webhook).

An admin who sets GPULAB_ADMIN_WEBHOOK_URL (an incoming-webhook URL, chosen by the admin,
never by a user) hears about what needs a person without watching the cluster page:

- a node went DOWN (silent past the liveness limit, or a launch gave up on it);
- a node came back from DOWN;
- a node was drained automatically (a GPU fault: Xid, ECC, a GPU the agent lost).

The body is JSON with `text` (what Slack and Mattermost show) and the same facts as
fields (`event`, `node`, `reason`, `at`, `site`) for other receivers. Sent after the
change commits: by a Celery task on the default queue with the Celery loop, inline (5 s
timeout) with the embedded demo loop. A post that fails is retried by the task (three
times, a minute apart) and then logged and dropped: it never fails the change itself.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

logger = logging.getLogger(__name__)

POST_TIMEOUT_SECONDS = 5


class WebhookRefused(Exception):
    """The receiver answered with an error status, or could not be reached."""


def node_event_notify(*, event: str, node: str, reason: str = "") -> None:
    """Post `event` about `node` once the current transaction commits (if a webhook is
    configured). `event` is one of "node_down", "node_back", "node_drained"."""
    if not settings.GPULAB_ADMIN_WEBHOOK_URL:
        return
    payload = node_event_payload(event=event, node=node, reason=reason)

    def send(payload: dict[str, Any] = payload) -> None:  # a function: on_commit(robust=True)
        _request_send(payload)

    transaction.on_commit(send, robust=True)


WORDS = {
    "node_down": "is DOWN",
    "node_back": "is back",
    "node_drained": "was drained automatically",
}


def node_event_payload(*, event: str, node: str, reason: str) -> dict[str, Any]:
    text = f"[gpulab] Node {node} {WORDS.get(event, event)}"
    text += f": {reason}" if reason else "."
    if settings.GPULAB_SITE_URL:
        text += f" {settings.GPULAB_SITE_URL.rstrip('/')}/cluster/"
    return {
        "text": text,
        "event": event,
        "node": node,
        "reason": reason,
        "at": timezone.now().isoformat(),
        "site": settings.GPULAB_SITE_URL,
    }


def _request_send(payload: dict[str, Any]) -> None:
    """Through Celery where rounds run there, here otherwise; never raises."""
    try:
        if settings.GPULAB_SCHEDULER_MODE == "celery":
            from .tasks import webhook_post_task  # tasks imports this module

            webhook_post_task.delay(payload)
        else:
            webhook_post(payload)
    except Exception as exc:
        # The message only, never a traceback: the URL's path is the webhook's secret, and
        # a connection error's traceback quotes it.
        logger.warning("Webhook about node %s not sent: %s", payload.get("node"), exc)


def webhook_post(payload: dict[str, Any]) -> None:
    """POST `payload` as JSON to GPULAB_ADMIN_WEBHOOK_URL; WebhookRefused on failure.

    No redirects: a webhook URL answers where it is configured, and a redirect could send
    the lab's node names elsewhere.
    """
    url = settings.GPULAB_ADMIN_WEBHOOK_URL
    try:
        response = requests.post(
            url, json=payload, timeout=POST_TIMEOUT_SECONDS, allow_redirects=False
        )
    except requests.RequestException as exc:
        # `from None`: the requests error quotes the URL, whose path is the secret; chained,
        # it would reach the logs and the Celery result backend with every retry.
        raise WebhookRefused(f"webhook unreachable: {exc.__class__.__name__}") from None
    if response.status_code >= 300:
        raise WebhookRefused(f"webhook answered {response.status_code}")
