"""The reservations resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from gpurental.api.reservations import views

router = SimpleRouter()
router.register("reservations", views.ReservationViewSet, basename="reservation")

urlpatterns = [
    path("availability/", views.AvailabilityView.as_view(), name="availability"),
]
