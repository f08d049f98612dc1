from config.api_urls import api_path

from .views import AgentHeartbeatApi, JobLogsApi

urlpatterns = [
    *api_path("heartbeat/", AgentHeartbeatApi, name="agent-heartbeat"),
    *api_path("jobs/<int:job_id>/logs/", JobLogsApi, name="job-logs"),
]
