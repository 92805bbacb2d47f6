"""Payments (top-ups) keep the rules every resource keeps (tests/api/resources.py)."""

from decimal import Decimal

from gpurental.billing.models import Payment
from tests.api.resources import OwnedResourceRules


class TestPaymentRules(OwnedResourceRules):
    list_url = "/api/v1/payments/"

    def make(self, request, owner):
        # A top-up as payment_start records it before the customer reaches the provider
        # (no provider here: the rules are about who sees the row).
        return Payment.objects.create(
            user=owner, provider="stripe", amount=Decimal("20.00"), currency="USD"
        )
