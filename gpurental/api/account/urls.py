"""The account resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from gpurental.api.account import views

router = SimpleRouter()
router.register("api-keys", views.ApiKeyViewSet, basename="api-key")

urlpatterns = [
    path("me/", views.MeView.as_view(), name="me"),
    path("me/log-out-everywhere/", views.LogoutEverywhereView.as_view(), name="log-out-everywhere"),
]
