from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list_page, name="list"),
    path("submit/", views.job_submit_page, name="submit"),
    path("<int:job_id>/", views.job_detail_page, name="detail"),
    path("<int:job_id>/logs/", views.job_logs_fragment, name="logs-fragment"),
    path("<int:job_id>/cancel/", views.job_cancel_page, name="cancel"),
    path("<int:job_id>/keep/", views.job_idle_keep_page, name="idle-keep"),
]
