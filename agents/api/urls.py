from django.urls import path

from .views import AgentHeartbeatApi, JobLogsApi

urlpatterns = [
    path("heartbeat/", AgentHeartbeatApi.as_view(), name="agent-heartbeat"),
    path("jobs/<int:job_id>/logs/", JobLogsApi.as_view(), name="job-logs"),
]
