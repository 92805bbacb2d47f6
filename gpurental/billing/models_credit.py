"""Money coming in: top-up payments through a provider, the provider's webhook events,
and voucher codes with their redemptions.

Imported by ``billing.models`` so that Django finds them; the ledger stays the one
record of credit: a paid payment and a redemption each point at their ledger entry.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class PaymentStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    PAID = "paid", _("Paid")
    FAILED = "failed", _("Failed")


class Payment(models.Model):
    """One top-up. Made (pending) before the customer is sent to the provider, so the
    amount and currency the webhook reports are checked against what was asked for."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="payments"
    )

    class Kind(models.TextChoices):
        CHECKOUT = "checkout", _("Top-up at the provider's checkout page")
        AUTO = "auto", _("Automatic top-up (saved card, off-session)")

    provider = models.CharField(max_length=16)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CHECKOUT)
    provider_ref = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="The provider's checkout session id (an automatic top-up: its payment intent)",
    )
    failure = models.CharField(max_length=300, blank=True, default="")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    status = models.CharField(
        max_length=16, choices=PaymentStatus.choices, default=PaymentStatus.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    paid_at = models.DateTimeField(null=True, blank=True)
    ledger_entry = models.OneToOneField(
        "billing.LedgerEntry",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="payment",
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="payment_amount_positive"),
            models.CheckConstraint(
                condition=~Q(status="paid")
                | (Q(paid_at__isnull=False) & Q(ledger_entry__isnull=False)),
                name="payment_paid_is_credited",
            ),
            models.UniqueConstraint(
                fields=["provider", "provider_ref"],
                condition=~Q(provider_ref=""),
                name="payment_one_per_provider_ref",
            ),
            # One automatic top-up in flight per customer: the next waits for its webhook.
            models.UniqueConstraint(
                fields=["user"],
                condition=Q(kind="auto", status="pending"),
                name="payment_one_auto_topup_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.receipt_number} {self.amount} {self.currency} {self.status}"

    @property
    def receipt_number(self) -> str:
        return f"R-{str(self.id)[:8].upper()}"


class PaymentEvent(models.Model):
    """A provider's webhook event, verified and recorded once: the unique event id is
    what makes a replayed or duplicated event credit once."""

    class Outcome(models.TextChoices):
        CREDITED = "credited", "Credited"
        ALREADY_PAID = "already_paid", "Payment already credited"
        IGNORED = "ignored", "Ignored (event type not handled)"
        REFUSED = "refused", "Refused"
        CARD_SAVED = "card_saved", "Card saved for automatic top-ups"
        FAILED = "failed", "Payment failed"

    provider = models.CharField(max_length=16)
    event_id = models.CharField(max_length=255)
    event_type = models.CharField(max_length=100)
    payment = models.ForeignKey(
        Payment, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    detail = models.CharField(max_length=500, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "event_id"], name="paymentevent_once_per_event"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.event_id} {self.event_type} {self.outcome}"


class Voucher(models.Model):
    """A code staff hand out: ``amount`` of credit, redeemable until ``expires_at`` by up to
    ``max_uses`` accounts, each once; the credit lasts ``credit_days`` after redemption."""

    code = models.CharField(
        max_length=64, unique=True, help_text="Stored upper-case; customers may type any case"
    )
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    expires_at = models.DateTimeField(help_text="Last moment the code can be redeemed")
    credit_days = models.PositiveIntegerField(
        default=7, help_text="How long the credit lasts after redemption (unspent credit expires)"
    )
    max_uses = models.PositiveIntegerField(default=1)
    uses = models.PositiveIntegerField(default=0)
    first_topup_only = models.BooleanField(
        default=False, help_text="Only for accounts that have never paid"
    )
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="voucher_amount_positive"),
            models.CheckConstraint(condition=Q(max_uses__gte=1), name="voucher_max_uses_positive"),
            models.CheckConstraint(
                condition=Q(uses__lte=F("max_uses")), name="voucher_uses_capped"
            ),
            models.CheckConstraint(condition=Q(credit_days__gte=1), name="voucher_credit_days"),
        ]

    def __str__(self) -> str:
        return self.code

    def save(self, *args, **kwargs):
        self.code = self.code.strip().upper()
        super().save(*args, **kwargs)


class VoucherRedemption(models.Model):
    """One account's use of one voucher (at most one: the unique constraint). Its credit is
    spent before paid credit; what is left at ``credit_expires_at`` is taken back by a
    ledger adjustment (``expiry_entry``)."""

    voucher = models.ForeignKey(Voucher, on_delete=models.PROTECT, related_name="redemptions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="voucher_redemptions"
    )
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    redeemed_at = models.DateTimeField(default=timezone.now)
    credit_expires_at = models.DateTimeField()
    ledger_entry = models.OneToOneField(
        "billing.LedgerEntry", on_delete=models.PROTECT, related_name="voucher_redemption"
    )
    expired_amount = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Unspent at expiry"
    )
    expiry_entry = models.OneToOneField(
        "billing.LedgerEntry",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="voucher_expiry",
    )

    class Meta:
        ordering = ["-redeemed_at"]
        constraints = [
            models.UniqueConstraint(fields=["voucher", "user"], name="voucher_once_per_user"),
            models.CheckConstraint(
                condition=Q(amount__gt=0), name="voucherredemption_amount_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.voucher.code} by {self.user}"

    @property
    def settled(self) -> bool:
        return self.expired_amount is not None


class VoucherRefund(models.Model):
    """The part of a refund that goes back to a voucher's credit, because that credit paid
    for what is refunded: it is voucher credit again, spent first and expiring at the
    redemption's ``credit_expires_at``. Refunded after that moment, it is taken back at
    once by a ledger adjustment (``expiry_entry``). The refund's ledger entry carries the
    whole amount; these rows say where it came from (billing/services/refunds.py)."""

    redemption = models.ForeignKey(
        VoucherRedemption, on_delete=models.PROTECT, related_name="refunds"
    )
    refund_entry = models.ForeignKey(
        "billing.LedgerEntry", on_delete=models.PROTECT, related_name="voucher_refunds"
    )
    debit_entry = models.ForeignKey(
        "billing.LedgerEntry",
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The debit refunded, which this voucher's credit paid for (in part)",
    )
    amount = models.DecimalField(max_digits=14, decimal_places=6)
    expiry_entry = models.OneToOneField(
        "billing.LedgerEntry",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Refunded after the credit expired: taken back at once",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="voucherrefund_amount_positive"),
            models.UniqueConstraint(
                fields=["refund_entry", "debit_entry", "redemption"],
                name="voucherrefund_once_per_refund",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.amount} back to {self.redemption}"


ZERO = Decimal(0)


class AutoTopUp(models.Model):
    """A customer's automatic top-up: when the balance falls below ``threshold``, charge
    ``amount`` to the saved card, at most ``monthly_cap`` per calendar month (operator's
    zone). The card is the provider's: only its references and a label are kept."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="auto_topup",
    )
    enabled = models.BooleanField(default=False)
    threshold = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("10.00"))
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("50.00"))
    monthly_cap = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("200.00"))
    provider = models.CharField(max_length=16, blank=True, default="")
    customer_ref = models.CharField(
        max_length=255, blank=True, default="", help_text="The provider's customer id"
    )
    payment_method_ref = models.CharField(
        max_length=255, blank=True, default="", help_text="The saved card at the provider"
    )
    card_label = models.CharField(max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "automatic top-up"
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="autotopup_amount_positive"),
            models.CheckConstraint(
                condition=Q(threshold__gte=0), name="autotopup_threshold_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(monthly_cap__gte=F("amount")), name="autotopup_cap_covers_amount"
            ),
            models.CheckConstraint(
                condition=Q(enabled=False) | ~Q(payment_method_ref=""),
                name="autotopup_enabled_has_card",
            ),
        ]

    def __str__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"auto top-up {state} for {self.user}: {self.amount} below {self.threshold}"


class AutoTopUpMonth(models.Model):
    """What automatic top-ups have taken in one calendar month: the database refuses more
    than the cap (a charge reserves its amount here before the provider is asked; a failed
    charge gives it back)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="auto_topup_months"
    )
    month = models.DateField(help_text="First day of the month, in the operator's time zone")
    charged = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0.00"))
    cap = models.DecimalField(max_digits=12, decimal_places=2)
    cap_reached_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-month"]
        constraints = [
            models.UniqueConstraint(fields=["user", "month"], name="autotopupmonth_once"),
            models.CheckConstraint(
                condition=Q(charged__gte=0) & Q(charged__lte=F("cap")),
                name="autotopupmonth_within_cap",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.month:%Y-%m}: {self.charged} of {self.cap}"


class AutoTopUpEvent(models.Model):
    """Append-only history of a customer's automatic top-up: settings, card, charges."""

    class Kind(models.TextChoices):
        SETTINGS = "settings", _("Settings changed")
        CARD_SAVED = "card_saved", _("Card saved")
        CARD_REMOVED = "card_removed", _("Card removed")
        CHARGE_STARTED = "charge_started", _("Charge started")
        CHARGE_FAILED = "charge_failed", _("Charge failed")
        CHARGE_UNANSWERED = "unanswered", _("Provider did not answer; to be retried")
        CREDITED = "credited", _("Credited")
        CAP_REACHED = "cap_reached", _("Monthly cap reached")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="auto_topup_events"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    payment = models.ForeignKey(
        Payment, null=True, blank=True, on_delete=models.PROTECT, related_name="auto_topup_events"
    )
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.user} {self.kind} {self.detail}"
