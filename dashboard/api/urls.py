from django.urls import path

from . import cluster, fairness, queue, usage, utilization

urlpatterns = [
    path("queue/", queue.QueueApi.as_view(), name="queue"),
    path("cluster/", cluster.ClusterApi.as_view(), name="cluster"),
    path("utilization/", utilization.UtilizationApi.as_view(), name="utilization"),
    path("fairness/", fairness.FairnessApi.as_view(), name="fairness"),
    path("usage/", usage.UsageApi.as_view(), name="usage"),
]
