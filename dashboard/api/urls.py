from config.api_urls import api_path

from . import cluster, fairness, queue, quotas, usage, utilization

urlpatterns = [
    *api_path("queue/", queue.QueueApi, name="queue"),
    *api_path("cluster/", cluster.ClusterApi, name="cluster"),
    *api_path("utilization/", utilization.UtilizationApi, name="utilization"),
    *api_path("fairness/", fairness.FairnessApi, name="fairness"),
    *api_path("usage/", usage.UsageApi, name="usage"),
    *api_path("quotas/", quotas.QuotasApi, name="quotas"),
]
