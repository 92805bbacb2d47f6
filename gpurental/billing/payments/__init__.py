"""Payment providers behind one small interface (``base.PaymentProvider``).

``provider()`` gives the configured one (``PAYMENT_PROVIDER``: ``stripe`` or ``none``);
Stripe is the one built. Alipay or WeChat Pay would be another module with the same
methods (checkout, webhook parsing, and for automatic top-ups: card setup and an
off-session charge).
"""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext as _

from gpurental.billing.payments.base import (
    CardSetup,
    ChargeResult,
    CheckoutSession,
    PaymentProvider,
    PaymentUnavailable,
    SavedCard,
    VerifiedEvent,
    WebhookRefused,
)

__all__ = [
    "CardSetup",
    "ChargeResult",
    "CheckoutSession",
    "PaymentProvider",
    "PaymentUnavailable",
    "SavedCard",
    "VerifiedEvent",
    "WebhookRefused",
    "provider",
    "provider_named",
    "unavailable_reason",
]


def unavailable_reason() -> str | None:
    """Why top-up cannot be offered now, in words for the customer; None when it can."""
    name = settings.PAYMENT_PROVIDER
    if name == "none":
        return _("Top-up is not available on this installation (PAYMENT_PROVIDER=none).")
    if name == "stripe":
        if not settings.STRIPE_SECRET_KEY or not settings.STRIPE_WEBHOOK_SECRET:
            return _(
                "Top-up is not available: the operator has not configured card payments "
                "(STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET). Ask them for credit or a voucher."
            )
        return None
    return _(
        "Top-up is not available: unknown PAYMENT_PROVIDER %(name)r (allowed: stripe, none)."
    ) % {"name": name}


def provider_named(name: str) -> PaymentProvider:
    if name == "stripe":
        from gpurental.billing.payments.stripe import StripeProvider

        return StripeProvider(
            secret_key=settings.STRIPE_SECRET_KEY,
            webhook_secret=settings.STRIPE_WEBHOOK_SECRET,
            api_base=settings.STRIPE_API_BASE or None,
            tolerance=settings.STRIPE_WEBHOOK_TOLERANCE,
        )
    raise PaymentUnavailable(f"no payment provider named {name!r}")


def provider() -> PaymentProvider:
    """The configured provider; ``PaymentUnavailable`` (with the reason) when there is none."""
    reason = unavailable_reason()
    if reason:
        raise PaymentUnavailable(reason)
    return provider_named(settings.PAYMENT_PROVIDER)
