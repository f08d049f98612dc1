"""Events posted to the lab's chat (Slack, Mattermost, or any JSON webhook).

Two kinds of receiver, both incoming-webhook URLs chosen by a lab admin, never by a user:

- the admins' GPULAB_ADMIN_WEBHOOK_URL hears about nodes that need a person: a node went
  DOWN (silent past the liveness limit, or a launch gave up on it), came back from DOWN,
  or was drained automatically (a GPU fault: Xid, ECC, a GPU the agent lost);
- a lab group's own `webhook_url` hears when its jobs start and end (jobs.webhooks).

The body is JSON with `text` (what Slack and Mattermost show) and the same facts as
fields (`event`, `node`, `reason`, `at`, `site`, ...) for other receivers. Sent after the
change commits, by `webhook_send` here for both: by a Celery task on the default queue
with the Celery loop, inline (5 s timeout) with the embedded demo loop. A post that fails
is retried by the task (three times, a minute apart) and then logged and dropped: it never
fails the change itself.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import LabGroup

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
        webhook_send(payload)

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


def webhook_send(
    payload: dict[str, Any], *, group_id: int | None = None, url: str | None = None
) -> None:
    """Post `payload` to the admins' webhook, or to group `group_id`'s: through Celery
    where rounds run there, here otherwise. Never raises.

    `url`, where the caller has just read it, saves reading it again for the inline post.
    The task is given the group, never the URL: it reads the URL at each try (a webhook
    cleared meanwhile gets nothing), and the URL, whose path is the secret, stays out of
    the broker and the result backend.
    """
    try:
        if settings.GPULAB_SCHEDULER_MODE == "celery":
            from .tasks import webhook_post_task  # tasks imports this module

            # A node event as before (the payload alone): a worker still running the
            # previous version takes it during an upgrade.
            if group_id is None:
                webhook_post_task.delay(payload)
            else:
                webhook_post_task.delay(payload=payload, group_id=group_id)
        else:
            target = webhook_url_get(group_id=group_id) if url is None else url
            if target:
                webhook_post(payload, url=target)
    except Exception as exc:
        # The message only, never a traceback: the URL's path is the webhook's secret, and
        # a connection error's traceback quotes it.
        logger.warning("Webhook about %s not sent: %s", webhook_about(payload), exc)


def webhook_url_get(*, group_id: int | None = None) -> str:
    """Where to post now: the admins' webhook, or group `group_id`'s own ("": nowhere)."""
    if group_id is None:
        return settings.GPULAB_ADMIN_WEBHOOK_URL
    urls = LabGroup.objects.filter(pk=group_id).values_list("webhook_url", flat=True)
    return urls.first() or ""


def webhook_about(payload: dict[str, Any]) -> str:
    """What a payload is about, for a log line: "node gpu-3", "array 7", "job 42"."""
    for key in ("node", "array", "job"):
        if payload.get(key) is not None:
            return f"{key} {payload[key]}"
    return str(payload.get("event", "an event"))


def webhook_post(payload: dict[str, Any], *, url: str | None = None) -> None:
    """POST `payload` as JSON to `url` (by default the admins' GPULAB_ADMIN_WEBHOOK_URL);
    WebhookRefused on failure.

    No redirects: a webhook URL answers where it is configured, and a redirect could send
    the lab's node and job names elsewhere.
    """
    if url is None:
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
