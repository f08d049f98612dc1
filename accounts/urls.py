from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from . import views

app_name = "accounts"
urlpatterns = [
    path("tokens/", views.token_list_page, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke_page, name="token-revoke"),
    # Django's own views; the old password is counted and locked out as a login's
    # (accounts.lockout), a refused check answered 429.
    path(
        "password/",
        views.login_lockout_status(
            views.LockoutPasswordChangeView.as_view(
                template_name="accounts/password_change.html",
                success_url=reverse_lazy("accounts:password-change-done"),
            )
        ),
        name="password-change",
    ),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(
            template_name="accounts/password_change_done.html"
        ),
        name="password-change-done",
    ),
]
