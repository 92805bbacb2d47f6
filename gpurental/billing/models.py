from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class RateKind(models.TextChoices):
    PEAK = "peak", _("Peak")
    OFF_PEAK = "off_peak", _("Off-peak")
    RESERVED = "reserved", _("Reserved")
    STORAGE = "storage", _("Storage")
    NO_GPU = "no_gpu", _("Without GPUs")


class Charge(models.Model):
    """Metered use of one instance over one closed interval at one rate.

    Unique per (instance, period_start): running the meter twice charges once.
    """

    instance = models.ForeignKey(
        "rentals.Instance", on_delete=models.PROTECT, related_name="charges"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="charges"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    rate_kind = models.CharField(max_length=16, choices=RateKind.choices)
    gpu_count = models.PositiveSmallIntegerField()
    hourly_rate = models.DecimalField(
        max_digits=16, decimal_places=8, help_text="Plan rate after discount (exact)"
    )
    amount = models.DecimalField(max_digits=12, decimal_places=6)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-period_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "period_start"], name="charge_once_per_interval"
            ),
            models.CheckConstraint(condition=Q(amount__gte=0), name="charge_amount_not_negative"),
            models.CheckConstraint(
                condition=Q(hourly_rate__gte=0), name="charge_rate_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="charge_period_positive"
            ),
        ]
        indexes = [models.Index(fields=["user", "period_start"])]

    def __str__(self) -> str:
        return f"{self.instance} {self.period_start:%Y-%m-%d %H:%M}–{self.period_end:%H:%M:%S} {self.amount}"

    @property
    def seconds(self) -> float:
        return (self.period_end - self.period_start).total_seconds()


class LedgerEntry(models.Model):
    """Append-only credit ledger. Balance = sum(amount); credits positive, debits negative.

    The database refuses UPDATE and DELETE on this table.
    """

    class Kind(models.TextChoices):
        CREDIT = "credit", _("Credit added")
        USAGE = "usage", _("Usage")
        RESERVATION = "reservation", _("Reservation")
        REFUND = "refund", _("Refund")
        ADJUSTMENT = "adjustment", _("Adjustment")
        VOUCHER = "voucher", _("Voucher credit")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="ledger"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    amount = models.DecimalField(max_digits=14, decimal_places=6)
    description = models.CharField(max_length=255, blank=True)
    charge = models.OneToOneField(
        Charge, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entry"
    )
    reservation = models.ForeignKey(
        "rentals.Reservation",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="ledger_entries",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(
                condition=~Q(kind__in=["credit", "refund"]) | Q(amount__gt=0),
                name="ledger_credit_positive",
            ),
            models.CheckConstraint(
                condition=~Q(kind__in=["usage", "reservation"]) | Q(amount__lte=0),
                name="ledger_debit_not_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.kind} {self.amount}"


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft", _("Draft")
    ISSUED = "issued", _("Issued")
    PAID = "paid", _("Paid")
    VOID = "void", _("Void")


class Invoice(models.Model):
    """A monthly invoice. Numbered without gaps when issued; immutable from then on.

    The database enforces it (migration 0004): once issued, only the status moves
    (issued → paid, issued → void, with their timestamps), and lines are frozen.
    """

    class Kind(models.TextChoices):
        INVOICE = "invoice", _("Invoice")
        CREDIT_NOTE = "credit_note", _("Credit note")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="invoices"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INVOICE)
    number = models.CharField(max_length=32, unique=True, null=True, blank=True)
    period_start = models.DateField()
    period_end = models.DateField(help_text="Exclusive")
    status = models.CharField(
        max_length=16, choices=InvoiceStatus.choices, default=InvoiceStatus.DRAFT
    )
    currency = models.CharField(max_length=3, default="USD")
    total = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0.00"))
    corrects = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="credit_notes"
    )
    bill_to = models.TextField(
        blank=True,
        help_text="The customer's name, company, address and e-mail, one per line, as they "
        "were when the invoice was issued (empty on drafts: the profile is read instead).",
    )
    created_at = models.DateTimeField(default=timezone.now)
    issued_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-period_start", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(total__gte=0), name="invoice_total_not_negative"),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="invoice_period_positive"
            ),
            models.CheckConstraint(
                condition=Q(status="draft")
                | (Q(number__isnull=False) & Q(issued_at__isnull=False)),
                name="invoice_issued_has_number",
            ),
            # A void invoice may be replaced by a new one for the same month.
            models.UniqueConstraint(
                fields=["user", "period_start"],
                condition=Q(kind="invoice") & ~Q(status="void"),
                name="invoice_one_per_user_month",
            ),
        ]

    def __str__(self) -> str:
        return self.number or f"draft {self.user} {self.period_start:%Y-%m}"


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="lines")
    instance = models.ForeignKey(
        "rentals.Instance", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reservation = models.ForeignKey(
        "rentals.Reservation", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    lease = models.ForeignKey(
        "baremetal.Lease", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # A stored thing's storage (gpurental/storage/): a volume, a saved image, or the
    # workspace of a stopped instance.
    stored_object_id = models.UUIDField(null=True, blank=True)
    rate_kind = models.CharField(max_length=16, choices=RateKind.choices)
    description = models.CharField(max_length=255)
    gpu_hours = models.DecimalField(max_digits=12, decimal_places=4)
    amount = models.DecimalField(max_digits=12, decimal_places=2)

    class Meta:
        ordering = ["invoice", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_hours__gte=0), name="invoiceline_hours_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(amount__gte=0), name="invoiceline_amount_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.description


class InvoiceCounter(models.Model):
    """The last number given in one series and year. Issuing locks this row, so numbers
    come without gaps (a sequence would skip the numbers of rolled-back transactions)."""

    series = models.CharField(max_length=8)
    year = models.PositiveSmallIntegerField()
    last = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["series", "year"], name="invoicecounter_one_per_year")
        ]

    def __str__(self) -> str:
        return f"{self.series}-{self.year}: {self.last}"


# Payments, webhook events and vouchers live in their own module; imported here so that
# Django registers them with the billing app.
from gpurental.billing.models_credit import (  # noqa: E402
    AutoTopUp,
    AutoTopUpEvent,
    AutoTopUpMonth,
    Payment,
    PaymentEvent,
    PaymentStatus,
    Voucher,
    VoucherRedemption,
)

__all__ = [
    "AutoTopUp",
    "AutoTopUpEvent",
    "AutoTopUpMonth",
    "Charge",
    "Invoice",
    "InvoiceCounter",
    "InvoiceLine",
    "InvoiceStatus",
    "LedgerEntry",
    "Payment",
    "PaymentEvent",
    "PaymentStatus",
    "RateKind",
    "Voucher",
    "VoucherRedemption",
]
