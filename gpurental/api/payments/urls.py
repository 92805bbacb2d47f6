"""The payments resource's routes, under /api/v1/ (gpurental.api.urls).

Its viewsets are registered on this router, whose registry joins the API's one router
(one API root listing every resource); its other views are plain paths."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from gpurental.api.payments import views

router = SimpleRouter()
router.register("payments", views.PaymentViewSet, basename="payment")

urlpatterns = [
    path("vouchers/redeem/", views.VoucherRedeemView.as_view(), name="voucher-redeem"),
    path("auto-topup/", views.AutoTopUpView.as_view(), name="auto-topup"),
    path("auto-topup/card/", views.AutoTopUpCardView.as_view(), name="auto-topup-card"),
]
