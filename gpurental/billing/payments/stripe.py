"""Stripe Checkout: a hosted payment page per top-up, credited from the signed webhook.

Only ``checkout.session.completed`` and ``checkout.session.async_payment_succeeded``
credit a checkout top-up; the signature and its timestamp are checked by
``stripe.Webhook.construct_event`` (tolerance ``STRIPE_WEBHOOK_TOLERANCE``, the library's
300 s by default).

Automatic top-ups: the card is saved through Checkout in ``setup`` mode for a Stripe
customer (it arrives as ``setup_intent.succeeded``), and each top-up is a PaymentIntent
confirmed off-session on that card, tagged ``metadata[purpose]=auto_topup``; only its
``payment_intent.succeeded`` event credits, ``payment_intent.payment_failed`` fails it.
PaymentIntents without that tag (Checkout makes its own) are not ours to act on.
"""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from typing import TYPE_CHECKING

import stripe as stripe_lib
from django.utils.translation import gettext_lazy

from gpurental.billing.payments.base import (
    CardSetup,
    ChargeResult,
    CheckoutSession,
    PaymentUnavailable,
    SavedCard,
    VerifiedEvent,
    WebhookRefused,
)

if TYPE_CHECKING:
    from gpurental.accounts.models import User
    from gpurental.billing.models import Payment

log = logging.getLogger(__name__)

PAID_TYPES = ("checkout.session.completed", "checkout.session.async_payment_succeeded")
AUTO_TOPUP = "auto_topup"  # metadata[purpose] of our off-session PaymentIntents
INTENT_TYPES = ("payment_intent.succeeded", "payment_intent.payment_failed")
UNAVAILABLE = gettext_lazy(
    "the payment provider did not answer; nothing was charged, try again shortly"
)
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
            raise PaymentUnavailable(UNAVAILABLE) from exc
        return CheckoutSession(ref=session.id, url=session.url)

    def create_card_setup(
        self, user: User, *, customer_ref: str, success_url: str, cancel_url: str, currency: str
    ) -> CardSetup:
        try:
            if not customer_ref:
                customer = self._client.v1.customers.create(
                    params={"email": user.email, "metadata": {"user_id": str(user.pk)}},
                    options={"idempotency_key": f"customer-{user.pk}-{user.email}"},
                )
                customer_ref = customer.id
            session = self._client.v1.checkout.sessions.create(
                params={
                    "mode": "setup",
                    "currency": currency.lower(),
                    "customer": customer_ref,
                    "client_reference_id": str(user.pk),
                    "setup_intent_data": {
                        "metadata": {"user_id": str(user.pk), "purpose": AUTO_TOPUP}
                    },
                    "success_url": success_url,
                    "cancel_url": cancel_url,
                }
            )
        except stripe_lib.StripeError as exc:
            log.warning("stripe card setup for user %s failed: %s", user.pk, exc.user_message)
            raise PaymentUnavailable(UNAVAILABLE) from exc
        return CardSetup(ref=session.id, url=session.url, customer_ref=customer_ref)

    def card_label(self, method_ref: str) -> str:
        try:
            method = self._client.v1.payment_methods.retrieve(method_ref)
        except stripe_lib.StripeError:
            return ""
        card = getattr(method, "card", None)
        last4 = getattr(card, "last4", None)
        if not last4:
            return ""
        return f"{getattr(card, 'brand', None) or 'card'} ending {last4}"[:64]

    def charge_saved(self, payment: Payment, *, customer_ref: str, method_ref: str) -> ChargeResult:
        params = {
            "amount": minor_units(payment.amount, payment.currency),
            "currency": payment.currency.lower(),
            "customer": customer_ref,
            "payment_method": method_ref,
            "off_session": True,
            "confirm": True,
            "description": f"Automatic top-up {payment.receipt_number}",
            "metadata": {"payment_id": str(payment.id), "purpose": AUTO_TOPUP},
        }
        try:
            intent = self._client.v1.payment_intents.create(
                params=params, options={"idempotency_key": f"auto-topup-{payment.id}"}
            )
        except stripe_lib.CardError as exc:
            # Declined, or the bank wants the customer present (authentication_required):
            # the PaymentIntent exists and is named in the error.
            body = (exc.json_body or {}).get("error") or {}
            intent = body.get("payment_intent") or {}
            reason = exc.code or "card_error"
            if body.get("decline_code"):
                reason += f" ({body['decline_code']})"
            return ChargeResult(
                ref=str(intent.get("id") or ""),
                status=str(intent.get("status") or "requires_payment_method"),
                failure=f"{reason}: {exc.user_message or 'the card was refused'}"[:300],
            )
        except stripe_lib.StripeError as exc:
            log.warning("stripe charge for payment %s failed: %s", payment.id, exc.user_message)
            raise PaymentUnavailable(UNAVAILABLE) from exc
        return ChargeResult(ref=intent.id, status=intent.status)

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
        obj = (data.get("data") or {}).get("object") or {}
        ignored = VerifiedEvent(
            provider=self.name, id=event_id, type=event_type, handled=False, raw=data
        )
        metadata = obj.get("metadata") or {}
        if event_type == "setup_intent.succeeded":
            if metadata.get("purpose") != AUTO_TOPUP:
                return ignored
            return self._card_saved(event_id, event_type, obj, data)
        if event_type in INTENT_TYPES:
            if metadata.get("purpose") != AUTO_TOPUP:
                return ignored
            return self._intent(event_id, event_type, obj, data)
        if event_type not in PAID_TYPES or obj.get("mode") == "setup":
            return ignored
        session = obj
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

    def _card_saved(self, event_id: str, event_type: str, intent: dict, data: dict):
        user_id = str((intent.get("metadata") or {}).get("user_id") or "")
        customer, method = intent.get("customer"), intent.get("payment_method")
        if not (user_id and isinstance(customer, str) and isinstance(method, str)):
            raise WebhookRefused(
                "payload: the setup intent has no user, customer or payment method",
                event_id=event_id,
                event_type=event_type,
            )
        return VerifiedEvent(
            provider=self.name,
            id=event_id,
            type=event_type,
            card=SavedCard(user_id=user_id, customer_ref=customer, method_ref=method),
            raw=data,
        )

    def _intent(self, event_id: str, event_type: str, intent: dict, data: dict):
        currency = str(intent.get("currency") or "")
        succeeded = event_type == "payment_intent.succeeded"
        amount = intent.get("amount_received") if succeeded else intent.get("amount")
        if not isinstance(amount, int) or not currency:
            raise WebhookRefused(
                "payload: the payment intent has no amount or currency",
                event_id=event_id,
                event_type=event_type,
            )
        error = intent.get("last_payment_error") or {}
        return VerifiedEvent(
            provider=self.name,
            id=event_id,
            type=event_type,
            payment_id=str((intent.get("metadata") or {}).get("payment_id") or ""),
            session_ref=str(intent.get("id") or ""),
            amount=major_units(amount, currency),
            currency=currency.upper(),
            paid=succeeded and intent.get("status") == "succeeded",
            failed=not succeeded,
            failure=str(error.get("code") or error.get("message") or "payment failed")[:300],
            raw=data,
        )
