from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from gpurental.api import (
    views,
    views_baremetal,
    views_billing,
    views_groups,
    views_notifications,
    views_payments,
    views_reservations,
    views_sshkeys,
    views_teams,
)
from gpurental.api.errors import not_found

router = DefaultRouter()
router.include_format_suffixes = False  # JSON only: no /instances.json variants
router.register("gpu-models", views.GPUModelViewSet, basename="gpu-model")
router.register("plans", views.PlanViewSet, basename="plan")
router.register("images", views.ImageViewSet, basename="image")
router.register("instances", views.InstanceViewSet, basename="instance")
router.register("api-keys", views.ApiKeyViewSet, basename="api-key")
router.register("ssh-keys", views_sshkeys.SSHKeyViewSet, basename="ssh-key")
router.register("reservations", views_reservations.ReservationViewSet, basename="reservation")
router.register("invoices", views_billing.InvoiceViewSet, basename="invoice")
router.register("groups", views_groups.GroupViewSet, basename="group")
router.register("webhooks", views_notifications.WebhookEndpointViewSet, basename="webhook")
router.register(
    "webhook-deliveries", views_notifications.WebhookDeliveryViewSet, basename="webhook-delivery"
)
router.register("notifications", views_notifications.NotificationViewSet, basename="notification")
router.register(
    "notification-preferences",
    views_notifications.NotificationPreferenceViewSet,
    basename="notification-preference",
)
router.register("payments", views_payments.PaymentViewSet, basename="payment")
router.register("dedicated-plans", views_baremetal.DedicatedPlanViewSet, basename="dedicated-plan")
router.register("leases", views_baremetal.LeaseViewSet, basename="lease")
router.register("teams", views_teams.TeamViewSet, basename="team")

v1 = [
    path("me/", views.MeView.as_view(), name="me"),
    path("availability/", views_reservations.AvailabilityView.as_view(), name="availability"),
    path("usage/", views_billing.UsageView.as_view(), name="usage"),
    path("usage/csv/", views_billing.UsageCsvView.as_view(), name="usage-csv"),
    path("vouchers/redeem/", views_payments.VoucherRedeemView.as_view(), name="voucher-redeem"),
    path("auto-topup/", views_payments.AutoTopUpView.as_view(), name="auto-topup"),
    path("auto-topup/card/", views_payments.AutoTopUpCardView.as_view(), name="auto-topup-card"),
    *router.urls,
]

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script (CSP).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("v1/", include((v1, "api"), namespace="api")),
    # Last: anything else under /api/ is a JSON 404 in the API's error shape.
    re_path(r"^[\s\S]*$", not_found, name="api-not-found"),  # newlines too
]
