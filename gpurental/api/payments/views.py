"""Paying in over the API: start a top-up (answers the provider's checkout URL), list and
read one's own payments, redeem a voucher, and set automatic top-up (its card is saved
at the provider's page). Another customer's payment is a 404."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from gpurental.addresses import client_ip
from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import UUID_RE, LookupMixin
from gpurental.api.payments import serializers as s
from gpurental.billing.models import Payment
from gpurental.billing.payments import PaymentUnavailable
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.autotopup import (
    AutoTopUpRefused,
    auto_topup_card_remove,
    auto_topup_card_start,
    auto_topup_configure,
    auto_topup_month,
    auto_topup_of,
)
from gpurental.billing.services.payments import PaymentRefused, payment_start
from gpurental.billing.services.vouchers import VoucherRefused, voucher_credit_of, voucher_redeem
from gpurental.teams.acting import account_of


class PaymentsUnavailable(APIException):
    """Refused by the state of things (no provider configured): a 409, like the others."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "payments_unavailable"
    default_detail = gettext_lazy("top-up is not available")


@extend_schema(tags=["billing"])
class PaymentViewSet(
    LookupMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Your top-ups. Credit is added when the payment provider confirms the payment."""

    scope_area = "billing"
    noun = gettext_lazy("payment")
    serializer_class = s.PaymentSerializer
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Payment.objects.none()
        return Payment.objects.filter(user=account_of(self.request)).order_by("-created_at")

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
                user=account_of(request),
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
            result = voucher_redeem(user=account_of(request), code=form.validated_data["code"])
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
            "balance": quantize_money(balance_of(user=account_of(request))),
            "voucher_credit": quantize_money(
                voucher_credit_of(user=account_of(request), now=timezone.now())
            ),
        }
        return Response(
            s.VoucherRedemptionSerializer(body).data,
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )


def _auto_topup_body(user) -> dict:
    row, month = auto_topup_of(user=user), auto_topup_month(user=user)
    return {
        "enabled": row.enabled,
        "threshold": row.threshold,
        "amount": row.amount,
        "monthly_cap": row.monthly_cap,
        "currency": settings.BILLING_CURRENCY,
        "card": row.card_label or None if row.payment_method_ref else None,
        "month_charged": month.charged if month else Decimal("0.00"),
    }


@extend_schema(tags=["billing"])
class AutoTopUpView(APIView):
    """Your automatic top-up: below ``threshold``, ``amount`` is charged to your saved card,
    at most ``monthly_cap`` in a calendar month. Credit comes when the provider confirms."""

    scope_area = "billing"

    @extend_schema(summary="Read your automatic top-up settings", responses=s.AutoTopUpSerializer)
    def get(self, request, *args, **kwargs):
        return Response(s.AutoTopUpSerializer(_auto_topup_body(account_of(request))).data)

    @extend_schema(
        summary="Set your automatic top-up",
        request=s.AutoTopUpSerializer,
        responses={
            200: s.AutoTopUpSerializer,
            400: OpenApiResponse(
                description="Invalid input (or no saved card to turn it on with); "
                "error.fields names the field at fault"
            ),
        },
        examples=[
            OpenApiExample(
                "On",
                value={
                    "enabled": True,
                    "threshold": "10.00",
                    "amount": "50.00",
                    "monthly_cap": "200.00",
                },
                request_only=True,
            )
        ],
    )
    def put(self, request, *args, **kwargs):
        form = s.AutoTopUpSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            auto_topup_configure(
                user=account_of(request), ip=client_ip(request), **form.validated_data
            )
        except AutoTopUpRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(s.AutoTopUpSerializer(_auto_topup_body(account_of(request))).data)


@extend_schema(tags=["billing"])
class AutoTopUpCardView(APIView):
    """The card automatic top-ups charge: saved at the provider's page, removed here."""

    scope_area = "billing"

    @extend_schema(
        summary="Start saving a card: answers the provider's page to save it at",
        request=None,
        responses={201: s.AutoTopUpCardSerializer},
    )
    def post(self, request, *args, **kwargs):
        try:
            url = auto_topup_card_start(user=account_of(request), base_url=settings.PUBLIC_URL)
        except PaymentUnavailable as exc:
            raise PaymentsUnavailable(str(exc)) from exc
        return Response({"setup_url": url}, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Remove the card (automatic top-up turns off)",
        responses={204: OpenApiResponse(description="Removed")},
    )
    def delete(self, request, *args, **kwargs):
        auto_topup_card_remove(user=account_of(request), ip=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
