"""Automatic top-up: below a threshold, charge a set amount to the customer's saved card,
never more than the monthly cap in a calendar month (the operator's zone).

- The card is saved at the provider's hosted page (``auto_topup_card_start``) and known
  here only from the provider's verified webhook (``auto_topup_card_saved``).
- ``auto_topup_check`` runs from the periodic billing job (and may be called whenever a
  balance changes). Under a row lock on the settings it reserves the amount in the
  month's ``AutoTopUpMonth`` row, whose check constraint refuses anything past the cap,
  and records a pending ``Payment``; one may be pending at a time (a partial unique
  index). The provider is asked outside the transaction, with the payment's id as
  idempotency key; a charge it never answered is asked again on the next pass with the
  same key, so a lost answer cannot become a second charge.
- Credit still comes only from the verified ``payment_intent.succeeded`` webhook (the
  same path as checkout top-ups, in ``services/payments.py``); a refused charge gives its
  amount back to the month and is recorded.
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Greatest
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.billing.models import (
    AutoTopUp,
    AutoTopUpEvent,
    AutoTopUpMonth,
    LedgerEntry,
    Payment,
    PaymentStatus,
)
from gpurental.billing.payments import PaymentProvider, PaymentUnavailable, SavedCard, provider
from gpurental.billing.selectors import balance_of, operator_zone

log = logging.getLogger(__name__)
CENT = Decimal("0.01")
# How long a charge the provider never answered is asked again (Stripe keeps an
# idempotency key for 24 hours), before it is failed and its amount given back.
UNANSWERED_GIVE_UP = timedelta(hours=23)


class AutoTopUpRefused(ValueError):
    """Settings that cannot be taken as given; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.message, self.field = message, field


def month_of(now: datetime) -> date:
    """The calendar month (its first day) ``now`` falls in, in the operator's zone."""
    return now.astimezone(operator_zone()).date().replace(day=1)


def _money(value, *, field: str, low: Decimal, high: Decimal | None = None) -> Decimal:
    cur = settings.BILLING_CURRENCY
    values = {"cur": cur, "low": f"{low:.2f}", "high": f"{high:.2f}" if high is not None else ""}
    if high is not None:
        rule = _("a number of %(cur)s from %(low)s to %(high)s, at most 2 decimals") % values
    else:
        rule = _("a number of %(cur)s from %(low)s, at most 2 decimals") % values
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise AutoTopUpRefused(_("must be %(rule)s") % {"rule": rule}, field=field) from None
    if (
        not amount.is_finite()
        or amount != amount.quantize(CENT)
        or amount < low
        or (high is not None and amount > high)
    ):
        raise AutoTopUpRefused(
            _("must be %(rule)s; got %(value)s") % {"rule": rule, "value": value}, field=field
        )
    return amount.quantize(CENT)


def _event(user_id, kind: str, detail: str = "", payment: Payment | None = None) -> None:
    AutoTopUpEvent.objects.create(user_id=user_id, kind=kind, detail=detail[:300], payment=payment)


def auto_topup_of(*, user: User) -> AutoTopUp:
    """The customer's settings (defaults, off, when never set; not saved until changed)."""
    return AutoTopUp.objects.filter(user=user).first() or AutoTopUp(user=user)


def auto_topup_month(*, user: User, now: datetime | None = None) -> AutoTopUpMonth | None:
    return AutoTopUpMonth.objects.filter(user=user, month=month_of(now or timezone.now())).first()


def auto_topup_configure(
    *,
    user: User,
    enabled: bool,
    threshold,
    amount,
    monthly_cap,
    now: datetime | None = None,
    ip: str | None = None,
) -> AutoTopUp:
    """Set the threshold, amount and monthly cap, and turn it on or off. Turning it on
    needs a saved card. Lowering the cap below what this month has taken stops further
    top-ups this month; it does not undo any."""
    now = now or timezone.now()
    low, high = settings.PAYMENT_MIN_AMOUNT, settings.PAYMENT_MAX_AMOUNT
    threshold = _money(threshold, field="threshold", low=Decimal("0.00"))
    amount = _money(amount, field="amount", low=low, high=high)
    cap = _money(monthly_cap, field="monthly_cap", low=low)
    if cap < amount:
        raise AutoTopUpRefused(
            _("must be at least the amount (%(amount)s); got %(cap)s")
            % {"amount": f"{amount:.2f}", "cap": f"{cap:.2f}"},
            field="monthly_cap",
        )
    with transaction.atomic():
        AutoTopUp.objects.get_or_create(user=user)
        row = AutoTopUp.objects.select_for_update().get(user=user)
        if enabled and not row.payment_method_ref:
            raise AutoTopUpRefused(
                _("save a card first (Credit page → Automatic top-up → Save a card)"),
                field="enabled",
            )
        before = (row.enabled, row.threshold, row.amount, row.monthly_cap)
        row.enabled, row.threshold, row.amount, row.monthly_cap = enabled, threshold, amount, cap
        if before == (row.enabled, row.threshold, row.amount, row.monthly_cap):
            return row
        row.updated_at = now
        row.save()
        # This month's ceiling follows the setting, but never below what was already taken.
        AutoTopUpMonth.objects.filter(user=user, month=month_of(now)).update(
            cap=Greatest(Value(cap), F("charged"))
        )
        detail = (
            f"{'on' if enabled else 'off'}: {amount} {settings.BILLING_CURRENCY} below "
            f"{threshold}, at most {cap} a month"
        )
        _event(user.pk, AutoTopUpEvent.Kind.SETTINGS, detail)
        audit_record(
            action="auto_topup.configure",
            actor=user,
            obj=user,
            changes={
                "enabled": enabled,
                "threshold": str(threshold),
                "amount": str(amount),
                "monthly_cap": str(cap),
            },
            ip_address=ip,
        )
    return row


def auto_topup_card_start(
    *, user: User, base_url: str, gateway: PaymentProvider | None = None
) -> str:
    """The provider's page where the customer saves a card; returns its URL."""
    gateway = gateway or provider()
    row = auto_topup_of(user=user)
    credit_url = base_url.rstrip("/") + reverse("billing_credit")
    setup = gateway.create_card_setup(
        user,
        customer_ref=row.customer_ref if row.provider == gateway.name else "",
        success_url=credit_url + "?card=saved",
        cancel_url=credit_url + "?card=cancelled",
        currency=settings.BILLING_CURRENCY,
    )
    with transaction.atomic():
        AutoTopUp.objects.get_or_create(user=user)
        AutoTopUp.objects.filter(user=user).update(
            provider=gateway.name, customer_ref=setup.customer_ref
        )
    return setup.url


def auto_topup_card_saved(
    *, card: SavedCard, provider_name: str, gateway: PaymentProvider | None = None
) -> str:
    """A verified event says a card was saved: keep its reference for off-session charges.
    Returns what was done, for the payment event's record."""
    user_id = int(card.user_id) if card.user_id.isdigit() else None
    if not AutoTopUp.objects.filter(user_id=user_id, customer_ref=card.customer_ref).exists():
        return f"card for customer {card.customer_ref}: not one of ours; nothing kept"
    # The label is asked for before the row is locked: no HTTP call under a lock.
    try:
        label = (gateway or provider()).card_label(card.method_ref)
    except PaymentUnavailable:
        label = ""
    with transaction.atomic():
        row = AutoTopUp.objects.select_for_update().get(user_id=user_id)
        if row.customer_ref != card.customer_ref:
            return f"card for customer {card.customer_ref}: no longer this customer's"
        row.provider, row.payment_method_ref = provider_name, card.method_ref
        row.card_label = label or "saved card"
        row.updated_at = timezone.now()
        row.save()
        _event(row.user_id, AutoTopUpEvent.Kind.CARD_SAVED, row.card_label)
    return f"card saved for automatic top-ups ({row.card_label})"


def auto_topup_card_remove(*, user: User, ip: str | None = None) -> None:
    """Forget the card and turn automatic top-up off."""
    with transaction.atomic():
        updated = AutoTopUp.objects.filter(user=user).exclude(payment_method_ref="")
        if not updated.update(enabled=False, payment_method_ref="", card_label=""):
            return
        _event(user.pk, AutoTopUpEvent.Kind.CARD_REMOVED, "automatic top-up turned off")
        audit_record(action="auto_topup.card_remove", actor=user, obj=user, ip_address=ip)


def auto_topup_check(
    *, user: User, now: datetime | None = None, gateway: PaymentProvider | None = None
) -> Payment | None:
    """Charge the saved card when the balance is below the threshold, nothing is already
    in flight and the month's cap allows it (or ask again for a charge the provider never
    answered); returns the payment asked for, if any."""
    now = now or timezone.now()
    with transaction.atomic():
        row = AutoTopUp.objects.select_for_update().filter(user=user, enabled=True).first()
        if row is None:
            return None
        pending = Payment.objects.filter(
            user=user, kind=Payment.Kind.AUTO, status=PaymentStatus.PENDING
        ).first()
        if pending is not None:
            if pending.provider_ref:
                return None  # the provider has it: wait for its webhook
            if now - pending.created_at > UNANSWERED_GIVE_UP:
                give_up = pending
                payment = None
            else:
                # Asked before and never answered: ask again with the same payment, so the
                # same idempotency key, so at most one charge whatever happened the first time.
                give_up, payment = None, pending
        else:
            give_up, payment = None, _reserve_and_start(row, user=user, now=now)
            if payment is None:
                return None
        customer_ref, method_ref = row.customer_ref, row.payment_method_ref
    if give_up is not None:
        auto_topup_fail(
            payment=give_up,
            reason="the payment provider did not answer for a day; given up (a charge it "
            "confirms later is still credited)",
            card_refused=False,
            now=now,
        )
        return None
    # The slow call, outside the lock; the provider's idempotency key is the payment id.
    try:
        result = (gateway or provider()).charge_saved(
            payment, customer_ref=customer_ref, method_ref=method_ref
        )
    except PaymentUnavailable as exc:
        # Not failed: the charge may have reached the provider. The next pass asks again
        # with the same idempotency key (kept by Stripe for 24 hours).
        _event(user.pk, AutoTopUpEvent.Kind.CHARGE_UNANSWERED, str(exc), payment)
        return payment
    if result.ref:
        Payment.objects.filter(pk=payment.pk, provider_ref="").update(provider_ref=result.ref)
        payment.provider_ref = result.ref
    if result.failure:
        auto_topup_fail(payment=payment, reason=result.failure)
    return payment


def _reserve_and_start(row: AutoTopUp, *, user: User, now: datetime) -> Payment | None:
    """Under the settings' row lock: below the threshold and within the month's cap,
    reserve the amount in the month and record the pending payment."""
    if balance_of(user=user) >= row.threshold:
        return None
    month, _created = AutoTopUpMonth.objects.get_or_create(
        user=user, month=month_of(now), defaults={"cap": row.monthly_cap}
    )
    # The reservation against the cap: refused here when it would pass it, and by the
    # table's check constraint should anything else try.
    reserved = AutoTopUpMonth.objects.filter(
        pk=month.pk, charged__lte=F("cap") - row.amount
    ).update(charged=F("charged") + row.amount)
    if not reserved:
        if AutoTopUpMonth.objects.filter(pk=month.pk, cap_reached_at__isnull=True).update(
            cap_reached_at=now
        ):
            _event(
                user.pk,
                AutoTopUpEvent.Kind.CAP_REACHED,
                f"{month.charged} of {month.cap} {settings.BILLING_CURRENCY} taken in "
                f"{month.month:%Y-%m}; no more automatic top-ups this month",
            )
        return None
    payment = Payment.objects.create(
        user=user,
        kind=Payment.Kind.AUTO,
        provider=row.provider,
        amount=row.amount,
        currency=settings.BILLING_CURRENCY,
        created_at=now,
    )
    _event(
        user.pk,
        AutoTopUpEvent.Kind.CHARGE_STARTED,
        f"{payment.amount} {payment.currency} to {row.card_label}",
        payment,
    )
    return payment


def auto_topup_fail(
    *, payment: Payment, reason: str, card_refused: bool = True, now: datetime | None = None
) -> bool:
    """A charge that did not go through: the payment fails and its amount goes back to
    the month it was reserved in. A card the bank refused (declined, or it wants the
    cardholder present) also turns automatic top-up off: retrying it every minute would
    not help, and the customer must act (top up by hand, or save another card). A
    provider that did not answer leaves it on for the next pass. Repeating it changes
    nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        failed = Payment.objects.filter(
            pk=payment.pk, kind=Payment.Kind.AUTO, status=PaymentStatus.PENDING
        ).update(status=PaymentStatus.FAILED, failure=reason[:300])
        if not failed:
            return False
        if card_refused and AutoTopUp.objects.filter(user_id=payment.user_id, enabled=True).update(
            enabled=False, updated_at=now
        ):
            reason = f"{reason}; automatic top-up turned off until you turn it on again"
        AutoTopUpMonth.objects.filter(
            user_id=payment.user_id, month=month_of(payment.created_at)
        ).update(charged=Greatest(F("charged") - payment.amount, Value(Decimal("0.00"))))
        _event(payment.user_id, AutoTopUpEvent.Kind.CHARGE_FAILED, reason, payment)
        audit_record(
            action="auto_topup.charge_failed",
            obj=payment,
            changes={"amount": str(payment.amount), "reason": reason[:300]},
        )
    log.info("automatic top-up %s failed: %s", payment.receipt_number, reason)
    return True


def auto_topup_run(*, now: datetime | None = None) -> int:
    """The periodic pass: every customer with automatic top-up on, a balance below their
    threshold and no charge in flight gets one check. Returns how many charges started."""
    now = now or timezone.now()
    balance = (
        LedgerEntry.objects.filter(user=OuterRef("user"))
        .order_by()
        .values("user")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    pending = Payment.objects.filter(
        user=OuterRef("user"), kind=Payment.Kind.AUTO, status=PaymentStatus.PENDING
    )
    due = (
        AutoTopUp.objects.filter(enabled=True)
        .annotate(balance=Coalesce(Subquery(balance), Value(Decimal(0))))
        .filter(
            (Q(balance__lt=F("threshold")) & ~Exists(pending))
            | Exists(pending.filter(provider_ref=""))  # unanswered: ask again
        )
        .select_related("user")
    )
    started = 0
    for row in due:
        try:
            if auto_topup_check(user=row.user, now=now) is not None:
                started += 1
        except Exception:  # noqa: BLE001 - one customer's failure must not stop the others
            log.exception("automatic top-up check for user %s failed", row.user_id)
    return started
