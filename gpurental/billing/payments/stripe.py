"""Stripe Checkout: a hosted payment page per top-up, credited from the signed webhook.

Only ``checkout.session.completed`` and ``checkout.session.async_payment_succeeded``
credit; the signature and its timestamp are checked by ``stripe.Webhook.construct_event``
(tolerance ``STRIPE_WEBHOOK_TOLERANCE``, the library's 300 s by default).
"""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from typing import TYPE_CHECKING

import stripe as stripe_lib

from gpurental.billing.payments.base import (
    CheckoutSession,
    PaymentUnavailable,
    VerifiedEvent,
    WebhookRefused,
)

if TYPE_CHECKING:
    from gpurental.billing.models import Payment

log = logging.getLogger(__name__)

PAID_TYPES = ("checkout.session.completed", "checkout.session.async_payment_succeeded")
# Currencies Stripe counts in whole units (https://docs.stripe.com/currencies#zero-decimal).
ZERO_DECIMAL = frozenset(
    [
        "bif",
        "clp",
        "djf",
        "gnf",
        "jpy",
        "kmf",
        "krw",
        "mga",
        "pyg",
        "rwf",
        "ugx",
        "vnd",
        "vuv",
        "xaf",
        "xof",
        "xpf",
    ]
)


def minor_units(amount: Decimal, currency: str) -> int:
    scale = 1 if currency.lower() in ZERO_DECIMAL else 100
    value = amount * scale
    if value != value.to_integral_value():
        raise ValueError(f"amount: {amount} has more decimals than {currency.upper()} allows")
    return int(value)


def major_units(amount: int, currency: str) -> Decimal:
    scale = 1 if currency.lower() in ZERO_DECIMAL else 100
    return (Decimal(amount) / scale).quantize(Decimal("0.01"))


class StripeProvider:
    name = "stripe"

    def __init__(
        self,
        *,
        secret_key: str,
        webhook_secret: str,
        api_base: str | None = None,
        tolerance: int = stripe_lib.Webhook.DEFAULT_TOLERANCE,
    ):
        self._webhook_secret = webhook_secret
        self._tolerance = tolerance
        base = {"api": api_base.rstrip("/")} if api_base else None
        self._client = stripe_lib.StripeClient(
            secret_key, base_addresses=base, max_network_retries=1
        )

    def create_checkout(
        self, payment: Payment, *, success_url: str, cancel_url: str
    ) -> CheckoutSession:
        params = {
            "mode": "payment",
            "client_reference_id": str(payment.id),
            "metadata": {"payment_id": str(payment.id)},
            "customer_email": payment.user.email,
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": payment.currency.lower(),
                        "unit_amount": minor_units(payment.amount, payment.currency),
                        "product_data": {"name": f"Credit top-up {payment.receipt_number}"},
                    },
                }
            ],
            "success_url": success_url,
            "cancel_url": cancel_url,
        }
        try:
            session = self._client.v1.checkout.sessions.create(
                params=params, options={"idempotency_key": f"checkout-{payment.id}"}
            )
        except stripe_lib.StripeError as exc:
            # The message is Stripe's (no key in it); the key itself is never logged.
            log.warning("stripe checkout for payment %s failed: %s", payment.id, exc.user_message)
            raise PaymentUnavailable(
                "the payment provider did not answer; nothing was charged, try again shortly"
            ) from exc
        return CheckoutSession(ref=session.id, url=session.url)

    def parse_webhook(self, payload: bytes, headers: dict[str, str]) -> VerifiedEvent:
        signature = headers.get("Stripe-Signature") or headers.get("stripe-signature")
        if not signature:
            raise WebhookRefused("no Stripe-Signature header")
        try:
            stripe_lib.Webhook.construct_event(
                payload, signature, self._webhook_secret, tolerance=self._tolerance
            )
        except stripe_lib.SignatureVerificationError as exc:
            raise WebhookRefused(f"signature: {exc.user_message or exc}") from exc
        except (ValueError, KeyError, IndexError) as exc:
            raise WebhookRefused(f"payload: not a Stripe event ({exc.__class__.__name__})") from exc
        data = json.loads(payload)
        event_id, event_type = str(data.get("id", "")), str(data.get("type", ""))
        if not event_id.startswith("evt_"):
            raise WebhookRefused("payload: no event id", event_type=event_type)
        if event_type not in PAID_TYPES:
            return VerifiedEvent(
                provider=self.name, id=event_id, type=event_type, handled=False, raw=data
            )
        session = (data.get("data") or {}).get("object") or {}
        currency = str(session.get("currency") or "")
        amount_total = session.get("amount_total")
        if not isinstance(amount_total, int) or not currency:
            raise WebhookRefused(
                "payload: the session has no amount_total or currency",
                event_id=event_id,
                event_type=event_type,
            )
        return VerifiedEvent(
            provider=self.name,
            id=event_id,
            type=event_type,
            payment_id=str(
                session.get("client_reference_id")
                or (session.get("metadata") or {}).get("payment_id")
                or ""
            ),
            session_ref=str(session.get("id") or ""),
            amount=major_units(amount_total, currency),
            currency=currency.upper(),
            paid=session.get("payment_status") in ("paid", "no_payment_required"),
            raw=data,
        )
