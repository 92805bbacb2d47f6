"""Top-ups: a pending Payment, the provider's checkout page, and the credit that only the
provider's verified webhook adds (once per event id, once per payment). Automatic
top-ups (services/autotopup.py) are credited, failed and given their saved card here too,
from the same verified events."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record, audit_record_anonymous
from gpurental.billing.models import AutoTopUpEvent, Payment, PaymentEvent, PaymentStatus
from gpurental.billing.payments import (
    PaymentProvider,
    VerifiedEvent,
    WebhookRefused,
    provider,
)
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.autotopup import auto_topup_card_saved, auto_topup_fail
from gpurental.billing.services.credits import credit_add
from gpurental.notifications.services import notify

log = logging.getLogger(__name__)
CENT = Decimal("0.01")


class PaymentRefused(ValueError):
    """A top-up that cannot start as asked; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.message, self.field = message, field


def _amount(value) -> Decimal:
    cur = settings.BILLING_CURRENCY
    low, high = settings.PAYMENT_MIN_AMOUNT, settings.PAYMENT_MAX_AMOUNT
    rule = {"cur": cur, "low": f"{low:.2f}", "high": f"{high:.2f}", "value": value}
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise PaymentRefused(
            _("must be a number of %(cur)s from %(low)s to %(high)s, at most 2 decimals") % rule,
            field="amount",
        ) from None
    if not amount.is_finite() or amount != amount.quantize(CENT) or not low <= amount <= high:
        raise PaymentRefused(
            _(
                "must be a number of %(cur)s from %(low)s to %(high)s, at most 2 decimals; "
                "got %(value)s"
            )
            % rule,
            field="amount",
        )
    return amount.quantize(CENT)


def payment_start(
    *, user: User, amount, base_url: str, gateway: PaymentProvider | None = None
) -> tuple[Payment, str]:
    """Record a pending payment of ``amount`` (BILLING_CURRENCY) and create its checkout
    page; returns the payment and the URL to send the customer to."""
    value = _amount(amount)
    gateway = gateway or provider()
    payment = Payment.objects.create(
        user=user, provider=gateway.name, amount=value, currency=settings.BILLING_CURRENCY
    )
    receipt = base_url.rstrip("/") + reverse("billing_payment", args=[payment.pk])
    session = gateway.create_checkout(
        payment,
        success_url=receipt + "?checkout=done",
        cancel_url=base_url.rstrip("/") + reverse("billing_credit") + "?checkout=cancelled",
    )
    Payment.objects.filter(pk=payment.pk).update(provider_ref=session.ref)
    payment.provider_ref = session.ref
    audit_record(
        action="payment.start",
        actor=user,
        obj=payment,
        changes={"amount": str(value), "currency": payment.currency, "provider": gateway.name},
    )
    return payment, session.url


def webhook_refuse(*, provider_name: str, refused: WebhookRefused, ip_address: str | None) -> None:
    """Audit a webhook that was not verified (forged, stale, malformed). Nothing of the
    request is trusted, so nothing of it is stored beyond the reason. Anyone can post one:
    coalesced per address and minute."""
    audit_record_anonymous(
        action="payment.webhook_refused",
        changes={
            "provider": provider_name,
            "reason": refused.reason[:300],
            "event_id": refused.event_id[:100],
            "event_type": refused.event_type[:100],
        },
        ip_address=ip_address,
    )


def _record(event: VerifiedEvent, outcome: str, detail: str, payment: Payment | None) -> bool:
    """Store the event once; False when it was seen before (a replay or a duplicate)."""
    try:
        with transaction.atomic():
            PaymentEvent.objects.create(
                provider=event.provider,
                event_id=event.id,
                event_type=event.type,
                payment=payment,
                outcome=outcome,
                detail=detail[:500],
            )
    except IntegrityError:
        return False
    return True


def payment_event_apply(
    *, event: VerifiedEvent, ip_address: str | None = None, now: datetime | None = None
) -> tuple[str, str]:
    """Act on a verified event; returns (outcome, detail). Raises ``WebhookRefused`` for an
    event that names an unknown payment or disagrees with it (recorded and audited first)."""
    now = now or timezone.now()
    if event.card is not None:
        # Not under the transaction below: saving a card asks the provider for its label.
        if not _record(event, PaymentEvent.Outcome.CARD_SAVED, "", None):
            return "duplicate", f"event {event.id} was processed before; nothing done"
        detail = auto_topup_card_saved(card=event.card, provider_name=event.provider)
        PaymentEvent.objects.filter(provider=event.provider, event_id=event.id).update(
            detail=detail[:500]
        )
        return PaymentEvent.Outcome.CARD_SAVED, detail
    with transaction.atomic():
        outcome, detail = _apply(event, ip_address=ip_address, now=now)
    if outcome == PaymentEvent.Outcome.REFUSED:
        raise WebhookRefused(detail, event_id=event.id, event_type=event.type)
    return outcome, detail


def _apply(event: VerifiedEvent, *, ip_address: str | None, now: datetime) -> tuple[str, str]:
    duplicate = ("duplicate", f"event {event.id} was processed before; nothing done")
    if PaymentEvent.objects.filter(provider=event.provider, event_id=event.id).exists():
        return duplicate
    if not event.handled:
        detail = f"event type {event.type} is not handled"
        if _record(event, PaymentEvent.Outcome.IGNORED, detail, None):
            audit_record(
                action="payment.webhook_ignored",
                changes={"provider": event.provider, "event_id": event.id, "type": event.type},
                ip_address=ip_address,
            )
        return PaymentEvent.Outcome.IGNORED, detail
    # The row lock orders two events for one payment (completed, then async succeeded).
    payment = (
        Payment.objects.select_for_update()
        .filter(pk=_uuid_or_none(event.payment_id), provider=event.provider)
        .select_related("user")
        .first()
    )
    problem = _mismatch(event, payment)
    if problem:
        if _record(event, PaymentEvent.Outcome.REFUSED, problem, payment):
            audit_record(
                action="payment.webhook_refused",
                obj=payment,
                changes={
                    "provider": event.provider,
                    "event_id": event.id,
                    "event_type": event.type,
                    "reason": problem,
                },
                ip_address=ip_address,
            )
        return PaymentEvent.Outcome.REFUSED, problem
    if event.failed:
        if not _record(event, PaymentEvent.Outcome.FAILED, event.failure, payment):
            return duplicate
        auto_topup_fail(payment=payment, reason=event.failure, now=now)
        return PaymentEvent.Outcome.FAILED, f"payment failed: {event.failure}"
    if not event.paid:
        detail = "checkout completed but not paid yet; waiting for async_payment_succeeded"
        _record(event, PaymentEvent.Outcome.IGNORED, detail, payment)
        return PaymentEvent.Outcome.IGNORED, detail
    if payment.status == PaymentStatus.PAID:
        detail = f"payment {payment.receipt_number} was credited before"
        _record(event, PaymentEvent.Outcome.ALREADY_PAID, detail, payment)
        return PaymentEvent.Outcome.ALREADY_PAID, detail
    if not _record(event, PaymentEvent.Outcome.CREDITED, "", payment):
        return duplicate
    entry = credit_add(
        user=payment.user,
        amount=payment.amount,
        description=f"Top-up {payment.receipt_number} ({payment.provider})",
    )
    payment.status, payment.paid_at, payment.ledger_entry = PaymentStatus.PAID, now, entry
    payment.save(update_fields=["status", "paid_at", "ledger_entry"])
    if payment.kind == Payment.Kind.AUTO:
        AutoTopUpEvent.objects.create(
            user_id=payment.user_id,
            kind=AutoTopUpEvent.Kind.CREDITED,
            payment=payment,
            detail=f"{payment.amount} {payment.currency} credited",
        )
    audit_record(
        action="payment.paid",
        obj=payment,
        changes={"amount": str(payment.amount), "currency": payment.currency, "event": event.id},
        ip_address=ip_address,
    )
    # The receipt goes out as the "payment received" notification (e-mail with a link to
    # the receipt page, and webhooks), after the commit, on the channels the payer keeps on.
    notify(
        payment.user,
        "payment_received",
        dedupe_key=f"payment:{payment.pk}",
        amount=payment.amount,
        currency=payment.currency,
        reference=payment.receipt_number,
        provider=payment.provider,
        balance=balance_of(user=payment.user),
        payment_id=str(payment.pk),
    )
    return PaymentEvent.Outcome.CREDITED, f"credited {payment.amount} {payment.currency}"


def _uuid_or_none(text: str):
    try:
        return uuid.UUID(text)
    except (ValueError, TypeError):
        return None


def _mismatch(event: VerifiedEvent, payment: Payment | None) -> str:
    if payment is None:
        return f"payment: no {event.provider} payment {event.payment_id or '(none named)'}"
    if event.session_ref and payment.provider_ref and event.session_ref != payment.provider_ref:
        return f"session: {event.session_ref} is not this payment's checkout session"
    if event.currency != payment.currency:
        return f"currency: the event says {event.currency}, the payment is in {payment.currency}"
    if event.amount != payment.amount:
        return (
            f"amount: the event says {event.amount} {event.currency}, "
            f"the payment is for {payment.amount} {payment.currency}"
        )
    return ""
