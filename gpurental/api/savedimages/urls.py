"""The saved images resource's routes, under /api/v1/ (gpurental.api.urls)."""

from rest_framework.routers import SimpleRouter

from gpurental.api.savedimages import views

router = SimpleRouter()
router.register("saved-images", views.SavedImageViewSet, basename="saved-image")

urlpatterns = []
