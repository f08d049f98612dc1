from django.contrib import admin

from .models import Device, DeviceType, Node


class DeviceInline(admin.TabularInline):
    model = Device
    extra = 0


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "address", "state", "runtime", "last_heartbeat_at", "simulated"]
    list_filter = ["state", "runtime", "simulated"]
    search_fields = ["name", "address"]
    inlines = [DeviceInline]


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
