"""Fields that several resources' serializers share: money, currency, times. Money is a
string (DecimalField), never a float."""

from __future__ import annotations

from datetime import UTC
from decimal import ROUND_HALF_UP

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


class CurrencyField(serializers.ReadOnlyField):
    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", "ISO 4217 code of every amount in this response")
        super().__init__(source="*", **kwargs)

    def to_representation(self, value) -> str:
        return settings.BILLING_CURRENCY


extend_schema_field(OpenApiTypes.STR)(CurrencyField)


@extend_schema_field(
    {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]:[0-5][0-9]$", "example": "08:00:00"}
)
class LocalTimeField(serializers.TimeField):
    """A time of day in the operator's time zone (``TIME_ZONE``): HH:MM:SS, no offset."""


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant with its offset: a bare wall-clock time is refused, not guessed."""

    default_error_messages = {
        "naive": gettext_lazy("add a time zone: e.g. 2026-12-03T10:00Z or 2026-12-03T11:00+01:00"),
    }

    def __init__(self, **kwargs):
        # In UTC, not the current time zone: the services word their messages in UTC.
        kwargs.setdefault("default_timezone", UTC)
        super().__init__(**kwargs)

    def enforce_timezone(self, value):
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)  # out of range after conversion: "overflow"


def money_field(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14, decimal_places=4, rounding=ROUND_HALF_UP, read_only=True, **kwargs
    )


def amount_field(**kwargs) -> serializers.DecimalField:
    """An amount of money as invoiced: to the cent."""
    return serializers.DecimalField(
        max_digits=14, decimal_places=2, rounding=ROUND_HALF_UP, read_only=True, **kwargs
    )


def hours_field(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14, decimal_places=4, rounding=ROUND_HALF_UP, read_only=True, **kwargs
    )


class StorageMonthlyField(serializers.ReadOnlyField):
    """What keeping the object costs a month (730 h) at today's storage price: ``gb_of``
    gives its size in GB (gpurental/storage/)."""

    def __init__(self, kind: str, gb_of, **kwargs):
        kwargs.setdefault(
            "help_text", "What keeping it costs a month (730 h) at today's storage price"
        )
        self.kind, self.gb_of = kind, gb_of
        super().__init__(source="*", **kwargs)

    def to_representation(self, value) -> str:
        from gpurental.storage.selectors import monthly_cost
        from gpurental.storage.services import prices

        # The prices once per response, not once per object of a list.
        rates = self.context.setdefault("storage_prices", None) or prices()
        self.context["storage_prices"] = rates
        return str(monthly_cost(self.kind, self.gb_of(value), rates))


extend_schema_field({"type": "string", "format": "decimal"})(StorageMonthlyField)


def zone_of_host_field(what: str) -> serializers.CharField:
    """The zone of the object's host, by name (null: its host is in none)."""
    return serializers.CharField(
        source="host.zone.name", read_only=True, allow_null=True, default=None, help_text=what
    )
