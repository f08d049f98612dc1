from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import Device, DeviceType, Node
from .services import node_drain, node_undrain


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
    inlines = [DeviceInline]
    actions = ["drain", "undrain"]

    @admin.action(description="Drain: no new jobs; running ones finish")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            node_drain(node_id=node.pk, reason="from the admin", by_username=request.user.username)
        self.message_user(request, f"Draining {queryset.count()} node(s).", messages.SUCCESS)

    @admin.action(description="Undrain: take new jobs again")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            node_undrain(node_id=node.pk)
        self.message_user(request, f"Undrained {queryset.count()} node(s).", messages.SUCCESS)


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
    ]
    list_filter = ["kind", "device_type", "node"]
    search_fields = ["uuid", "model_name", "node__name"]
