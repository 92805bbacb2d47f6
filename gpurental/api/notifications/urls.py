"""The notifications resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from rest_framework.routers import SimpleRouter

from gpurental.api.notifications import views

router = SimpleRouter()
router.register("webhooks", views.WebhookEndpointViewSet, basename="webhook")
router.register("webhook-deliveries", views.WebhookDeliveryViewSet, basename="webhook-delivery")
router.register("notifications", views.NotificationViewSet, basename="notification")
router.register(
    "notification-preferences",
    views.NotificationPreferenceViewSet,
    basename="notification-preference",
)

urlpatterns = []
