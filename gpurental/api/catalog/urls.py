"""The catalog resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from rest_framework.routers import SimpleRouter

from gpurental.api.catalog import views

router = SimpleRouter()
router.register("gpu-models", views.GPUModelViewSet, basename="gpu-model")
router.register("plans", views.PlanViewSet, basename="plan")
router.register("images", views.ImageViewSet, basename="image")

urlpatterns = []
