"""The cluster page: every node and device at a glance, with drain and undrain for admins.

Thin: `dashboard.selectors.cluster` reads and redacts, `cluster.services` drains (a DOWN
node too: it then comes back DRAINED, not UP) and writes the audit log. The drain
and undrain forms post, then redirect back (POST/redirect/GET), so the page's auto-refresh
always re-reads the cluster page itself. A GET of either (the login form sends a post made
after the session ended back as one) changes nothing and says so on the cluster page.
"""

from __future__ import annotations

import time

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from cluster.choices import DRAIN_STATES, NodeState, node_can_drain, node_can_undrain
from cluster.models import Device, Node
from cluster.services import device_cordon, device_uncordon, node_drain, node_undrain

from ..selectors.cluster import FRESH_READING, HEALTH_WINDOW, age_text, cluster_overview

REFRESH_SECONDS = 15
# A refused drain's node, typed reason and error, kept in the session: every render of the
# page marks that node's reason field and shows what was typed, auto-refreshes included
# (read once, the error was gone at the next refresh, or taken by a refresh that came
# between the post and its redirect), until the admin posts a drain or an undrain again
# or DRAIN_ERROR_SECONDS have passed.
DRAIN_ERROR_KEY = "dashboard:drain-error"
DRAIN_ERROR_SECONDS = 600


class NodeDrainForm(forms.Form):
    REASON_MAX = 200
    reason = forms.CharField(
        max_length=REASON_MAX, help_text="Why, for the other admins and the node's history."
    )


@login_required
def cluster_page(request: HttpRequest) -> HttpResponse:
    overview = cluster_overview(viewer=request.user)
    drain_error = _drain_error(request) if request.user.is_lab_admin else None
    return render(
        request,
        "dashboard/cluster.html",
        {
            "overview": overview,
            "counts": overview.counts,
            "nodes": overview.nodes,
            "fresh_text": age_text(FRESH_READING.total_seconds()),
            "health_hours": int(HEALTH_WINDOW.total_seconds() // 3600),
            "refresh_seconds": REFRESH_SECONDS,
            "drain_error": drain_error,
        },
    )


def _drain_error(request: HttpRequest) -> dict[str, object] | None:
    error = request.session.get(DRAIN_ERROR_KEY)
    if error is None:
        return None
    if not isinstance(error.get("at"), (int, float)) or time.time() - error["at"] > (
        DRAIN_ERROR_SECONDS
    ):
        del request.session[DRAIN_ERROR_KEY]
        return None
    return error


def _admin_node(request: HttpRequest, node_id: int) -> Node:
    # Checked before the lookup: a student learns nothing about which node ids exist.
    if not request.user.is_lab_admin:
        raise PermissionDenied("Only admins drain and undrain nodes.")
    return get_object_or_404(Node, pk=node_id)


def _state_words(node: Node) -> str:
    words = node.get_state_display().lower()
    if node.state == NodeState.DOWN and node.return_state in DRAIN_STATES:
        words += " and comes back drained"
    return words


def _nothing_changed(request: HttpRequest, node: Node, *, can: bool, action: str) -> HttpResponse:
    # A GET never changes anything (like jobs.views.job_cancel_page): back to the page, where
    # the form is, saying that the node was left as it is.
    if can:
        button = "enter a reason and press Drain" if action == "drain" else "press Undrain"
        messages.info(request, f"Node {node.name} was not {action}ed; {button} to {action} it.")
    return redirect("dashboard:cluster")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def node_drain_page(request: HttpRequest, node_id: int) -> HttpResponse:
    node = _admin_node(request, node_id)
    if request.method != "POST":
        can = node_can_drain(node.state, node.return_state)
        return _nothing_changed(request, node, can=can, action="drain")
    request.session.pop(DRAIN_ERROR_KEY, None)  # an earlier refusal is answered by this post
    form = NodeDrainForm(request.POST)
    if not form.is_valid():
        # The only field: the message names it, since the form lives on another page.
        errors = " ".join(form.errors.get("reason", []))
        messages.error(request, f"Node {node.name} not drained. Reason: {errors}")
        request.session[DRAIN_ERROR_KEY] = {
            "node_id": node.pk,
            # What was typed, cut to what the field could ever hold and a bit: shown again.
            "reason": request.POST.get("reason", "")[: 2 * NodeDrainForm.REASON_MAX],
            "error": errors,
            "at": time.time(),
        }
        return redirect("dashboard:cluster")
    if not node_can_drain(node.state, node.return_state):
        messages.error(request, f"Node {node.name} is {_state_words(node)}; nothing to drain.")
        return redirect("dashboard:cluster")
    drained = node_drain(node_id=node.pk, reason=form.cleaned_data["reason"], by=request.user)
    if drained.state == NodeState.DOWN and drained.return_state in DRAIN_STATES:
        messages.success(
            request,
            f"Node {node.name} is down; it comes back drained, not up, once its agent answers.",
        )
    elif drained.state == NodeState.DRAINED:
        messages.success(request, f"Node {node.name} is drained: nothing runs or starts there.")
    elif drained.state == NodeState.DRAINING:
        messages.success(
            request,
            f"Node {node.name} is draining: its running jobs finish, no new job starts there.",
        )
    else:  # its state changed in between (e.g. it went down)
        messages.error(request, f"Node {node.name} is {_state_words(drained)}; not drained.")
    return redirect("dashboard:cluster")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def node_undrain_page(request: HttpRequest, node_id: int) -> HttpResponse:
    node = _admin_node(request, node_id)
    if request.method != "POST":
        can = node_can_undrain(node.state, node.return_state)
        return _nothing_changed(request, node, can=can, action="undrain")
    request.session.pop(DRAIN_ERROR_KEY, None)  # the admin has moved on from the refusal
    if not node_can_undrain(node.state, node.return_state):
        messages.error(request, f"Node {node.name} is {_state_words(node)}; nothing to undrain.")
        return redirect("dashboard:cluster")
    undrained = node_undrain(node_id=node.pk, by=request.user)
    if undrained.state == NodeState.UP:
        messages.success(request, f"Node {node.name} is up: it takes new jobs again.")
    elif undrained.state == NodeState.DOWN and undrained.return_state == NodeState.UP:
        messages.success(
            request, f"Node {node.name} is down; it comes back up once its agent answers."
        )
    else:
        messages.error(request, f"Node {node.name} is {_state_words(undrained)}; not undrained.")
    return redirect("dashboard:cluster")


# --------------------------------------------------------------------------- GPU cordon


def _admin_device(request: HttpRequest, device_id: int) -> Device:
    # Checked before the lookup, as for nodes.
    if not request.user.is_lab_admin:
        raise PermissionDenied("Only admins cordon and uncordon GPUs.")
    return get_object_or_404(Device.objects.select_related("node"), pk=device_id)


def _gpu_name(device: Device) -> str:
    return f"GPU {device.index} of {device.node.name}"


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def device_cordon_page(request: HttpRequest, device_id: int) -> HttpResponse:
    device = _admin_device(request, device_id)
    if request.method != "POST":
        messages.info(request, f"{_gpu_name(device)} was not cordoned; press Cordon to cordon it.")
        return redirect("dashboard:cluster")
    form = NodeDrainForm(request.POST)
    if not form.is_valid():
        errors = " ".join(form.errors.get("reason", []))
        messages.error(request, f"{_gpu_name(device)} not cordoned. Reason: {errors}")
        return redirect("dashboard:cluster")
    if device.cordoned_at is not None:
        messages.info(request, f"{_gpu_name(device)} is cordoned already.")
        return redirect("dashboard:cluster")
    device_cordon(device_id=device.pk, reason=form.cleaned_data["reason"], by=request.user)
    messages.success(
        request,
        f"{_gpu_name(device)} is cordoned: no new job starts on it; a job running there "
        "finishes. Its faults no longer drain the node.",
    )
    return redirect("dashboard:cluster")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def device_uncordon_page(request: HttpRequest, device_id: int) -> HttpResponse:
    device = _admin_device(request, device_id)
    if request.method != "POST":
        messages.info(
            request, f"{_gpu_name(device)} was not uncordoned; press Uncordon to uncordon it."
        )
        return redirect("dashboard:cluster")
    if device.cordoned_at is None:
        messages.info(request, f"{_gpu_name(device)} is not cordoned.")
        return redirect("dashboard:cluster")
    device_uncordon(device_id=device.pk, by=request.user)
    messages.success(request, f"{_gpu_name(device)} is back in service.")
    return redirect("dashboard:cluster")
