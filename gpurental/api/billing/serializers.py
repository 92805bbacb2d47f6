"""Shapes of usage reports and invoices. Money is a string, never a float."""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import serializers

from gpurental.api.fields import CurrencyField, amount_field, hours_field
from gpurental.billing.models import Invoice, InvoiceLine
from gpurental.billing.pricing import local_month
from gpurental.billing.selectors import operator_zone


class MonthQuerySerializer(serializers.Serializer):
    month = serializers.RegexField(
        r"^[0-9]{4}-[0-9]{2}$",
        required=False,
        help_text="YYYY-MM; default: this month in the operator's time zone",
        error_messages={"invalid": gettext_lazy("use YYYY-MM, e.g. 2026-10")},
    )

    def validate_month(self, value: str) -> str:
        try:
            year, month = int(value[:4]), int(value[5:])
            local_month(year, month, operator_zone())
        except (ValueError, OverflowError):
            raise serializers.ValidationError(
                _("no such month; use YYYY-MM, e.g. 2026-10")
            ) from None
        return value

    def year_month(self) -> tuple[int, int]:
        value = self.validated_data.get("month")
        if not value:
            today = timezone.now().astimezone(operator_zone())
            return today.year, today.month
        return int(value[:4]), int(value[5:])


class UsageRowSerializer(serializers.Serializer):
    day = serializers.DateField(read_only=True, help_text="In the operator's time zone")
    instance_id = serializers.CharField(read_only=True)
    instance_name = serializers.CharField(read_only=True)
    plan = serializers.CharField(read_only=True)
    gpu_hours = hours_field()
    cost = amount_field()


class UsageTotalsSerializer(serializers.Serializer):
    gpu_hours = hours_field()
    cost = amount_field(help_text="The exact costs added up, then rounded once")


class UsageSerializer(serializers.Serializer):
    month = serializers.CharField(read_only=True, help_text="YYYY-MM")
    start = serializers.DateTimeField(read_only=True)
    end = serializers.DateTimeField(read_only=True, help_text="Exclusive")
    currency = CurrencyField()
    rows = UsageRowSerializer(many=True, read_only=True)
    totals = UsageTotalsSerializer(read_only=True)


class InvoiceLineSerializer(serializers.ModelSerializer):
    instance = serializers.UUIDField(source="instance_id", read_only=True, allow_null=True)
    reservation = serializers.UUIDField(source="reservation_id", read_only=True, allow_null=True)
    gpu_hours = hours_field()
    amount = amount_field()

    class Meta:
        model = InvoiceLine
        fields = ["description", "instance", "reservation", "rate_kind", "gpu_hours", "amount"]
        read_only_fields = fields


class InvoiceSerializer(serializers.ModelSerializer):
    """One shape for list and detail (see ReservationSerializer): lines included."""

    # A plain string: ``kind`` is an enum of instance events already.
    kind = serializers.CharField(read_only=True, help_text="invoice or credit_note")
    corrects = serializers.SlugRelatedField(
        slug_field="number", read_only=True, help_text="The invoice a credit note corrects"
    )
    period_end = serializers.DateField(read_only=True, help_text="Exclusive")
    total = amount_field()
    lines = InvoiceLineSerializer(many=True, read_only=True)

    class Meta:
        model = Invoice
        fields = [
            "id",
            "number",
            "kind",
            "status",
            "period_start",
            "period_end",
            "currency",
            "total",
            "corrects",
            "issued_at",
            "paid_at",
            "voided_at",
            "lines",
        ]
        read_only_fields = fields
