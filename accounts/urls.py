from django.urls import path

from . import views

app_name = "accounts"
urlpatterns = [
    path("tokens/", views.token_list_page, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke_page, name="token-revoke"),
]
