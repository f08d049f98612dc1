from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.forms import LoginForm
from accounts.views import admin_password_change_page, login_lockout_status

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="jobs:list", permanent=False), name="home"),
    path(
        "login/",
        login_lockout_status(auth_views.LoginView.as_view(authentication_form=LoginForm)),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("jobs/", include("jobs.urls")),
    path("account/", include("accounts.urls")),
    path("", include("dashboard.urls")),
    # Before admin.site.urls, to answer a locked-out attempt with 429 (accounts.lockout).
    path("admin/login/", login_lockout_status(admin.site.login)),
    # The same for the old password of the admin's password change; admin_view keeps its
    # staff-only check.
    path(
        "admin/password_change/",
        login_lockout_status(admin.site.admin_view(admin_password_change_page)),
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("jobs.api.urls")),
    path("api/v1/agents/", include("agents.api.urls")),
    path("api/v1/", include("dashboard.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
