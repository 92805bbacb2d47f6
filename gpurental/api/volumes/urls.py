"""The volumes resource's routes, under /api/v1/ (gpurental.api.urls)."""

from rest_framework.routers import SimpleRouter

from gpurental.api.volumes import views

router = SimpleRouter()
router.register("volumes", views.VolumeViewSet, basename="volume")
router.register("snapshots", views.SnapshotViewSet, basename="snapshot")

urlpatterns = []
