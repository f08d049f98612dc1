from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from config.errors import Conflict

from .models import Device, DeviceType, Node
from .services import device_retire, node_drain, node_undrain


class DeviceInline(admin.TabularInline):
    model = Device
    extra = 0


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
    inlines = [DeviceInline]
    actions = ["drain", "undrain"]

    @admin.action(description="Drain: no new jobs; running ones finish")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = []
        for node in queryset:
            after = node_drain(
                node_id=node.pk, reason="from the admin", by_username=request.user.username
            )
            if after.state != node.state:
                changed.append(node.name)
        self._report(request, "Drained", changed, queryset.count(), "up or suspect")

    @admin.action(description="Undrain: take new jobs again")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = [
            node.name for node in queryset if node_undrain(node_id=node.pk).state != node.state
        ]
        self._report(request, "Undrained", changed, queryset.count(), "draining or drained")

    def _report(
        self, request: HttpRequest, verb: str, changed: list[str], selected: int, allowed: str
    ) -> None:
        """Say what happened: a DOWN node, say, is neither drained nor undrained."""
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
    ]
    list_filter = ["kind", "device_type", "node", ("retired_at", admin.EmptyFieldListFilter)]
    search_fields = ["uuid", "model_name", "node__name"]
    # Set by heartbeats when another GPU takes the slot, or by the action below.
    readonly_fields = ["retired_at"]
    actions = ["retire"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Device]:
        return Device.all_objects.select_related("node", "device_type")  # retired ones too

    @admin.action(description="Retire: the GPU was removed from its node")
    def retire(self, request: HttpRequest, queryset: QuerySet[Device]) -> None:
        for device in queryset:
            try:
                device_retire(device_id=device.pk)
            except Conflict as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
            else:
                self.message_user(request, f"Retired {device}.")
