"""The interface every payment provider implements, and what it hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpurental.accounts.models import User
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
class CardSetup:
    """A hosted page where the customer saves a card for automatic top-ups."""

    ref: str
    url: str
    customer_ref: str  # the provider's customer the card will belong to


@dataclass(frozen=True)
class SavedCard:
    """A card the provider says was saved (from a verified event)."""

    user_id: str
    customer_ref: str
    method_ref: str


@dataclass(frozen=True)
class ChargeResult:
    """What the provider answered to an off-session charge. Never credit from this: only
    the verified webhook credits. ``failure`` is set when the charge was refused."""

    ref: str
    status: str
    failure: str = ""


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
    card: SavedCard | None = None  # a card saved for automatic top-ups
    failed: bool = False  # an automatic top-up's charge failed (``failure`` says why)
    failure: str = ""
    raw: dict = field(default_factory=dict, repr=False)


class PaymentProvider(Protocol):
    name: str

    def create_checkout(
        self, payment: Payment, *, success_url: str, cancel_url: str
    ) -> CheckoutSession:
        """Ask the provider for a hosted checkout page for ``payment`` (amount and currency
        from the row); raises ``PaymentUnavailable`` when the provider cannot be reached."""

    def create_card_setup(
        self, user: User, *, customer_ref: str, success_url: str, cancel_url: str, currency: str
    ) -> CardSetup:
        """A hosted page to save a card for off-session charges (creating the provider's
        customer when ``customer_ref`` is empty); the card arrives by verified webhook."""

    def card_label(self, method_ref: str) -> str:
        """A short, non-secret label of a saved card ("visa ending 4242"); "" if unknown."""

    def charge_saved(self, payment: Payment, *, customer_ref: str, method_ref: str) -> ChargeResult:
        """Charge ``payment`` (amount and currency from the row) to the saved card without
        the customer present; ``PaymentUnavailable`` when the provider cannot be reached."""

    def parse_webhook(self, payload: bytes, headers: dict[str, str]) -> VerifiedEvent:
        """Verify and read one webhook request; raises ``WebhookRefused`` for anything that
        is not a genuine, fresh event from the provider."""
