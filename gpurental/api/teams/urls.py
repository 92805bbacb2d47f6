"""The teams resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from rest_framework.routers import SimpleRouter

from gpurental.api.teams import views

router = SimpleRouter()
router.register("teams", views.TeamViewSet, basename="team")

urlpatterns = []
