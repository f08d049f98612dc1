from django.urls import path

from .views import JobCancelApi, JobDetailApi, JobListCreateApi

urlpatterns = [
    path("jobs/", JobListCreateApi.as_view(), name="job-list"),
    path("jobs/<int:job_id>/", JobDetailApi.as_view(), name="job-detail"),
    path("jobs/<int:job_id>/cancel/", JobCancelApi.as_view(), name="job-cancel"),
]
