from django.urls import path

from .views import admin_pages, cluster, fairness, queue, usage, utilization

app_name = "dashboard"
urlpatterns = [
    path("queue/", queue.queue_page, name="queue"),
    path("cluster/", cluster.cluster_page, name="cluster"),
    path("cluster/nodes/<int:node_id>/drain/", cluster.node_drain_page, name="node-drain"),
    path("cluster/nodes/<int:node_id>/undrain/", cluster.node_undrain_page, name="node-undrain"),
    path("cluster/gpus/<int:device_id>/cordon/", cluster.device_cordon_page, name="gpu-cordon"),
    path(
        "cluster/gpus/<int:device_id>/uncordon/", cluster.device_uncordon_page, name="gpu-uncordon"
    ),
    path("utilization/", utilization.utilization_page, name="utilization"),
    path("fairness/", fairness.fairness_page, name="fairness"),
    path("usage/", usage.usage_report_page, name="usage"),
    path("manage/quotas/", admin_pages.quota_list_page, name="quotas"),
    path("manage/quotas/users/<int:user_id>/", admin_pages.quota_user_page, name="quota-user"),
    path("manage/quotas/groups/<int:group_id>/", admin_pages.quota_group_page, name="quota-group"),
    path("manage/scheduler/", admin_pages.scheduler_settings_page, name="scheduler-settings"),
    path("manage/audit/", admin_pages.audit_log_page, name="audit"),
]
