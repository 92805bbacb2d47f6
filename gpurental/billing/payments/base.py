"""The interface every payment provider implements, and what it hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpurental.billing.models import Payment


class PaymentUnavailable(Exception):
    """Top-up cannot be offered (no provider configured, or the provider cannot be reached)."""


class WebhookRefused(Exception):
    """A webhook that must not credit anything: ``reason`` says why (for the audit log)."""

    def __init__(self, reason: str, *, event_id: str = "", event_type: str = ""):
        super().__init__(reason)
        self.reason, self.event_id, self.event_type = reason, event_id, event_type


@dataclass(frozen=True)
class CheckoutSession:
    ref: str  # the provider's id for it, kept on the Payment
    url: str  # where to send the customer


@dataclass(frozen=True)
class VerifiedEvent:
    """A webhook event whose signature (and freshness) the provider has checked."""

    provider: str
    id: str
    type: str
    # For payment events: which payment, and what the provider says was paid.
    payment_id: str = ""
    session_ref: str = ""
    amount: Decimal | None = None
    currency: str = ""
    paid: bool = False
    handled: bool = True  # False: a type we do not act on
    raw: dict = field(default_factory=dict, repr=False)


class PaymentProvider(Protocol):
    name: str

    def create_checkout(
        self, payment: Payment, *, success_url: str, cancel_url: str
    ) -> CheckoutSession:
        """Ask the provider for a hosted checkout page for ``payment`` (amount and currency
        from the row); raises ``PaymentUnavailable`` when the provider cannot be reached."""

    def parse_webhook(self, payload: bytes, headers: dict[str, str]) -> VerifiedEvent:
        """Verify and read one webhook request; raises ``WebhookRefused`` for anything that
        is not a genuine, fresh event from the provider."""
