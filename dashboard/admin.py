from django.contrib import admin

from .models import (
    AggregatesState,
    DeviceUtilizationBucket,
    QueueSample,
    UsageHour,
    UtilizationSample,
)


@admin.register(UsageHour)
class UsageHourAdmin(admin.ModelAdmin):
    list_display = ("hour", "user", "group", "device_type", "gpu_seconds", "service")
    list_filter = ("device_type", "group")
    date_hierarchy = "hour"


@admin.register(QueueSample)
class QueueSampleAdmin(admin.ModelAdmin):
    list_display = ("at", "level", "pending_jobs", "pending_gpus")
    date_hierarchy = "at"


@admin.register(UtilizationSample)
class UtilizationSampleAdmin(admin.ModelAdmin):
    list_display = (
        "at",
        "device_type",
        "devices",
        "schedulable",
        "allocated",
        "used",
        "used_allocated",
    )
    date_hierarchy = "at"


@admin.register(DeviceUtilizationBucket)
class DeviceUtilizationBucketAdmin(admin.ModelAdmin):
    list_display = ("start", "device", "utilization_avg", "samples")
    date_hierarchy = "start"


@admin.register(AggregatesState)
class AggregatesStateAdmin(admin.ModelAdmin):
    list_display = ("updated_at", "usage_rebuilt_from", "usage_time_zone", "last_duration_ms")
