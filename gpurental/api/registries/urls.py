"""The registry logins resource's routes, under /api/v1/ (gpurental.api.urls)."""

from rest_framework.routers import SimpleRouter

from gpurental.api.registries import views

router = SimpleRouter()
router.register("registry-logins", views.RegistryLoginViewSet, basename="registry-login")

urlpatterns = []
