"""The billing resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from gpurental.api.billing import views

router = SimpleRouter()
router.register("invoices", views.InvoiceViewSet, basename="invoice")

urlpatterns = [
    path("usage/", views.UsageView.as_view(), name="usage"),
    path("usage/csv/", views.UsageCsvView.as_view(), name="usage-csv"),
]
