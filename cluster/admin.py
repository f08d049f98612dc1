from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils import timezone

from config.errors import Conflict

from .models import Device, DeviceType, Node
from .services import device_retire, node_drain, node_undrain
from .validation import limit_label_errors


class NodeAdminForm(forms.ModelForm):
    class Meta:
        model = Node
        fields = ["name", "address", "ssh_port", "ssh_user", "runtime", "labels", "simulated"]

    def clean_labels(self) -> dict[str, Any]:
        """A JSON object; the launch limits it may carry must be usable numbers.

        `cpus_per_gpu` and `memory_mb_per_gpu` become every job's `--cpus`/`--memory` on
        this node: a bad one would fail each launch there, so it is refused here, naming
        the label, by the rule the launch applies (`cluster.validation`). Other keys (the
        agent's driver and CUDA versions) are free.
        """
        labels = self.cleaned_data.get("labels")
        if labels is None:  # an emptied field: no labels
            return {}
        if not isinstance(labels, dict):
            raise forms.ValidationError(
                'Enter a JSON object, e.g. {"cpus_per_gpu": 8, "memory_mb_per_gpu": 65536}.',
                code="labels_not_object",
            )
        try:
            # Python's JSON reads NaN and 1e999 (inf), which PostgreSQL's jsonb refuses.
            json.dumps(labels, allow_nan=False)
        except ValueError:
            raise forms.ValidationError(
                "Enter plain JSON numbers: NaN and Infinity cannot be stored.", code="labels_nan"
            ) from None
        if errors := limit_label_errors(labels):
            raise forms.ValidationError(
                [forms.ValidationError(message, code=name) for name, message in errors.items()]
            )
        return labels


class DeviceInlineFormSet(BaseInlineFormSet):
    """A node's devices, checked as a whole before anything is written.

    The database enforces one in-service device per (node, index) and one row per UUID,
    retired or not; each form alone cannot see its siblings or the retired rows, so a
    clash would otherwise surface as an IntegrityError (a 500) on save.
    """

    def clean(self) -> None:
        super().clean()
        kept = [
            form
            for form in self.forms
            if form.cleaned_data
            and not self._should_delete_form(form)
            and not form.errors  # its own field errors are already shown
        ]
        first_with_index: dict[int, int] = {}
        for position, form in enumerate(self.forms, start=1):
            if form not in kept or form.cleaned_data.get("index") is None:
                continue
            index = form.cleaned_data["index"]
            if index in first_with_index:
                form.add_error(
                    "index",
                    f"Index {index} is already given to device row {first_with_index[index]};"
                    " each device of a node needs its own index.",
                )
            else:
                first_with_index[index] = position
        own_ids = [form.instance.pk for form in self.forms if form.instance.pk]
        if self.instance.pk is not None:
            # A device registered meanwhile (a heartbeat) that is not on this page.
            others = Device.objects.filter(node=self.instance, index__in=list(first_with_index))
            for device in others.exclude(pk__in=own_ids):
                raise forms.ValidationError(
                    f"Index {device.index} is taken by {device.uuid}, registered since this "
                    "page was loaded; reload it.",
                    code="index_taken",
                )
        uuids = {form.cleaned_data["uuid"]: form for form in kept if form.cleaned_data.get("uuid")}
        # Retired devices are not in the default manager, so each form's own uniqueness
        # check misses them.
        clashes = Device.all_objects.filter(uuid__in=list(uuids)).exclude(pk__in=own_ids)
        for device in clashes.select_related("node"):
            uuids[device.uuid].add_error(
                "uuid",
                f"{device.uuid} is already registered as {device.node.name}/{device.index}"
                f"{' (retired)' if device.retired_at else ''}.",
            )


class DeviceInline(admin.TabularInline):
    model = Device
    formset = DeviceInlineFormSet
    extra = 0
    # Retiring goes through the Devices admin action, which refuses a GPU a job holds.
    readonly_fields = ["retired_at"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "address",
        "state",
        "state_reason",
        "runtime",
        "last_heartbeat_at",
        "simulated",
    ]
    list_filter = ["state", "runtime", "simulated"]
    search_fields = ["name", "address"]
    # State changes go through the drain/undrain actions and the liveness services, which
    # requeue or protect the node's jobs; an edited state would strand them.
    readonly_fields = ["state", "state_reason", "return_state", "last_heartbeat_at"]
    form = NodeAdminForm
    inlines = [DeviceInline]
    actions = ["drain", "undrain"]

    def save_formset(
        self, request: HttpRequest, form: forms.ModelForm, formset: Any, change: bool
    ) -> None:
        """Save the devices, letting indexes swap (0 ↔ 1) as the clean allowed.

        The (node, index) unique index cannot be deferred (it is partial), and the rows
        are saved one by one, so a swap would collide halfway. Rows whose index changes,
        and rows being deleted, are parked as retired first (outside that index); each
        is saved back in service with its new index, or deleted. All of it runs in the
        admin's transaction, so nothing else ever sees a parked row.
        """
        if formset.model is Device:
            deleted = {f.instance.pk for f in formset.deleted_forms if f.instance.pk}
            moved = {
                f.instance.pk
                for f in formset.forms
                if f.instance.pk and "index" in f.changed_data and f.instance.pk not in deleted
            }
            Device.objects.filter(pk__in=deleted | moved).update(retired_at=timezone.now())
        super().save_formset(request, form, formset, change)

    @admin.action(description="Drain: no new jobs; running ones finish (down: comes back drained)")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = []
        for node in queryset:
            after = node_drain(node_id=node.pk, reason="from the admin", by=request.user)
            if (after.state, after.return_state) != (node.state, node.return_state):
                changed.append(node.name)
        self._report(
            request, "Drained", changed, queryset.count(), "up, suspect or down (not drained)"
        )

    @admin.action(description="Undrain: take new jobs again")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = []
        for node in queryset:
            after = node_undrain(node_id=node.pk, by=request.user)
            if (after.state, after.return_state) != (node.state, node.return_state):
                changed.append(node.name)
        self._report(
            request,
            "Undrained",
            changed,
            queryset.count(),
            "draining, drained or down-and-drained",
        )

    def _report(
        self, request: HttpRequest, verb: str, changed: list[str], selected: int, allowed: str
    ) -> None:
        """Say what happened: an UP node, say, is not undrained."""
        if changed:
            self.message_user(request, f"{verb}: {', '.join(changed)}.", messages.SUCCESS)
        if skipped := selected - len(changed):
            left = f"{skipped} node(s) left as they were: only {allowed} nodes can be."
            self.message_user(request, left, messages.WARNING)


@admin.register(DeviceType)
class DeviceTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "speed"]
    search_fields = ["name", "display_name"]


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = [
        "__str__",
        "node",
        "index",
        "device_type",
        "kind",
        "model_name",
        "memory_mb",
        "uuid",
        "retired_at",
        "cordon_reason",
    ]
    list_filter = [
        "kind",
        "device_type",
        "node",
        ("retired_at", admin.EmptyFieldListFilter),
        ("cordoned_at", admin.EmptyFieldListFilter),
    ]
    search_fields = ["uuid", "model_name", "node__name"]
    # Set by heartbeats when another GPU takes the slot, or by the action below; a cordon
    # on the cluster page (with its reason, audited).
    readonly_fields = ["retired_at", "cordoned_at", "cordon_reason"]
    actions = ["retire"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Device]:
        return Device.all_objects.select_related("node", "device_type")  # retired ones too

    @admin.action(description="Retire: the GPU was removed from its node")
    def retire(self, request: HttpRequest, queryset: QuerySet[Device]) -> None:
        for device in queryset:
            try:
                device_retire(device_id=device.pk, by=request.user)
            except Conflict as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
            else:
                self.message_user(request, f"Retired {device}.")
