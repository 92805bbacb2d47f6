"""Paying in over the API: start a top-up (answers the provider's checkout URL), list and
read one's own payments, redeem a voucher. Another customer's payment is a 404."""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from gpurental.api import serializers_payments as s
from gpurental.api.idempotency import idempotent
from gpurental.api.views import IDEMPOTENCY_KEY, UUID_RE, LookupMixin
from gpurental.billing.models import Payment
from gpurental.billing.payments import PaymentUnavailable
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.payments import PaymentRefused, payment_start
from gpurental.billing.services.vouchers import VoucherRefused, voucher_credit_of, voucher_redeem


class PaymentsUnavailable(APIException):
    """Refused by the state of things (no provider configured): a 409, like the others."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "payments_unavailable"
    default_detail = "top-up is not available"


@extend_schema(tags=["billing"])
class PaymentViewSet(
    LookupMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Your top-ups. Credit is added when the payment provider confirms the payment."""

    scope_area = "billing"
    noun = "payment"
    serializer_class = s.PaymentSerializer
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Payment.objects.none()
        return Payment.objects.filter(user=self.request.user).order_by("-created_at")

    @extend_schema(
        summary="Start a top-up: answers the checkout URL to pay at",
        request=s.PaymentCreateSerializer,
        responses={201: s.PaymentStartedSerializer},
        parameters=[IDEMPOTENCY_KEY],
        examples=[OpenApiExample("Twenty", value={"amount": "20.00"}, request_only=True)],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.PaymentCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            payment, url = payment_start(
                user=request.user,
                amount=form.validated_data["amount"],
                base_url=settings.PUBLIC_URL,
            )
        except PaymentRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        except PaymentUnavailable as exc:
            raise PaymentsUnavailable(str(exc)) from exc
        data = s.PaymentSerializer(payment).data
        return Response({**data, "checkout_url": url}, status=status.HTTP_201_CREATED)


@extend_schema(tags=["billing"])
class VoucherRedeemView(GenericAPIView):
    """Redeem a voucher code: its credit is spent before paid credit and expires by itself."""

    scope_area = "billing"
    serializer_class = s.VoucherRedeemSerializer
    pagination_class = None

    @extend_schema(
        summary="Redeem a voucher code",
        request=s.VoucherRedeemSerializer,
        responses={201: s.VoucherRedemptionSerializer, 200: s.VoucherRedemptionSerializer},
        examples=[OpenApiExample("A trial code", value={"code": "POC-WEEK"}, request_only=True)],
    )
    def post(self, request, *args, **kwargs):
        form = s.VoucherRedeemSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            result = voucher_redeem(user=request.user, code=form.validated_data["code"])
        except VoucherRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        r = result.redemption
        body = {
            "code": r.voucher.code,
            "amount": r.amount,
            "currency": settings.BILLING_CURRENCY,
            "redeemed_at": r.redeemed_at,
            "credit_expires_at": r.credit_expires_at,
            "created": result.created,
            "balance": quantize_money(balance_of(user=request.user)),
            "voucher_credit": quantize_money(
                voucher_credit_of(user=request.user, now=timezone.now())
            ),
        }
        return Response(
            s.VoucherRedemptionSerializer(body).data,
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )
