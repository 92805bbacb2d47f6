"""Paying in over the API: top-ups (payments) and voucher redemption."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from gpurental.billing.models import Payment


class PaymentSerializer(serializers.ModelSerializer):
    receipt_number = serializers.CharField(read_only=True)

    class Meta:
        model = Payment
        fields = [
            "id",
            "receipt_number",
            "amount",
            "currency",
            "status",
            "kind",
            "failure",
            "provider",
            "created_at",
            "paid_at",
        ]
        read_only_fields = fields


class AutoTopUpSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="Needs a saved card (POST auto-topup/card/)")
    threshold = serializers.DecimalField(
        max_digits=12, decimal_places=2, help_text="Top up when the balance is below this"
    )
    amount = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        help_text=f"Charged each time, {settings.PAYMENT_MIN_AMOUNT} to "
        f"{settings.PAYMENT_MAX_AMOUNT} {settings.BILLING_CURRENCY}",
    )
    monthly_cap = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        help_text="At most this much in a calendar month (the operator's time zone)",
    )
    currency = serializers.CharField(read_only=True)
    card = serializers.CharField(
        read_only=True, allow_null=True, help_text="The saved card's label, or null"
    )
    month_charged = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        read_only=True,
        help_text="Taken by automatic top-ups this calendar month (pending ones included)",
    )


class AutoTopUpCardSerializer(serializers.Serializer):
    setup_url = serializers.URLField(
        read_only=True, help_text="Send the card holder here to save a card"
    )


class PaymentCreateSerializer(serializers.Serializer):
    amount = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        help_text=f"How much credit to buy, in {settings.BILLING_CURRENCY} "
        f"({settings.PAYMENT_MIN_AMOUNT} to {settings.PAYMENT_MAX_AMOUNT})",
    )


class PaymentStartedSerializer(PaymentSerializer):
    checkout_url = serializers.URLField(
        read_only=True,
        help_text="Send the payer here; the credit is added once the provider confirms",
    )

    class Meta(PaymentSerializer.Meta):
        fields = [*PaymentSerializer.Meta.fields, "checkout_url"]
        read_only_fields = fields


class VoucherRedeemSerializer(serializers.Serializer):
    code = serializers.CharField(max_length=64, help_text="The voucher code, any case")


class VoucherRedemptionSerializer(serializers.Serializer):
    code = serializers.CharField()
    amount = serializers.DecimalField(max_digits=12, decimal_places=2)
    currency = serializers.CharField()
    redeemed_at = serializers.DateTimeField()
    credit_expires_at = serializers.DateTimeField()
    created = serializers.BooleanField(
        help_text="False when this account had redeemed the code before (nothing added)"
    )
    balance = serializers.DecimalField(max_digits=14, decimal_places=2)
    voucher_credit = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        help_text="Voucher credit left now, spent before paid credit",
    )
