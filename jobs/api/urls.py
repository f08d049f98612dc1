from config.api_urls import api_path

from .views import ArrayCancelApi, JobCancelApi, JobDetailApi, JobListCreateApi

urlpatterns = [
    *api_path("jobs/", JobListCreateApi, name="job-list"),
    *api_path("jobs/<int:job_id>/", JobDetailApi, name="job-detail"),
    *api_path("jobs/<int:job_id>/cancel/", JobCancelApi, name="job-cancel"),
    *api_path("arrays/<int:array_id>/cancel/", ArrayCancelApi, name="array-cancel"),
]
