"""What keeping data costs: the price per GB-month of each kind of stored thing, and the
meter's charges for it. What is billed (gpurental/storage/services.py):

- a volume, at its size, from its creation to its deletion;
- a saved image, at its size in the registry, from the push to its deletion;
- the workspace of a stopped instance, at its plan's disk, for as long as it is stopped
  (while it runs, the plan's hourly price covers it).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class StoredKind(models.TextChoices):
    WORKSPACE = "workspace", _("Workspace of a stopped instance")
    VOLUME = "volume", _("Volume")
    SAVED_IMAGE = "saved_image", _("Saved image")
    SNAPSHOT = "snapshot", _("Snapshot")


class StoragePrice(models.Model):
    """The price of one GB kept for a month (730 hours) for one kind of stored thing, in
    the billing currency. One row per kind; staff change them in the back-office."""

    kind = models.CharField(max_length=16, choices=StoredKind.choices, unique=True)
    gb_month = models.DecimalField(
        max_digits=10, decimal_places=4, help_text="Price of 1 GB kept for a month (730 h)"
    )

    class Meta:
        ordering = ["kind"]
        constraints = [
            models.CheckConstraint(condition=Q(gb_month__gte=0), name="storageprice_not_negative")
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.gb_month}/GB-month"


class StorageCharge(models.Model):
    """Metered storage of one stored thing over one closed interval, posted to the ledger.

    Unique per (kind, stored thing, period_start): running the meter twice charges once."""

    id = models.BigAutoField(primary_key=True)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="storage_charges"
    )
    kind = models.CharField(max_length=16, choices=StoredKind.choices)
    object_id = models.UUIDField(help_text="The volume, saved image or instance")
    label = models.CharField(max_length=120, help_text="Its name when charged")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    gb = models.DecimalField(max_digits=12, decimal_places=3)
    hourly_rate = models.DecimalField(
        max_digits=16, decimal_places=8, help_text="gb × the GB-month price / 730 (exact)"
    )
    amount = models.DecimalField(max_digits=12, decimal_places=6)
    ledger_entry = models.OneToOneField(
        "billing.LedgerEntry", on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["period_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "object_id", "period_start"], name="storagecharge_once"
            ),
            models.CheckConstraint(condition=Q(amount__gte=0), name="storagecharge_amount"),
            models.CheckConstraint(condition=Q(gb__gte=0), name="storagecharge_gb"),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="storagecharge_period"
            ),
        ]
        indexes = [
            models.Index(fields=["account", "period_start"]),
            models.Index(fields=["object_id", "period_start"]),
        ]

    def __str__(self) -> str:
        return (
            f"{self.label} {self.period_start:%Y-%m-%d %H:%M}–{self.period_end:%H:%M} {self.amount}"
        )


class StorageMeter(models.Model):
    """How far one stored thing is charged (the meter's watermark): each charge starts
    where the last one ended, and the row is locked while it is metered."""

    kind = models.CharField(max_length=16, choices=StoredKind.choices)
    object_id = models.UUIDField()
    billed_until = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "object_id"], name="storagemeter_one_per_thing")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.object_id} to {self.billed_until:%Y-%m-%d %H:%M}"


class StorageArrears(models.Model):
    """An account that keeps things stored with no credit left to pay for them
    (``gpurental/storage/arrears.py``): noticed when found, again ``STORAGE_NOTICE_DAYS``
    before ``delete_at``, then its stored things are deleted. Gone when credit comes back
    or nothing is stored any more."""

    account = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.PROTECT, related_name="+"
    )
    since = models.DateTimeField(help_text="When the account was found without credit")
    delete_at = models.DateTimeField(help_text="When its stored things go, unless paid for")
    notified_days = models.PositiveSmallIntegerField(
        help_text="Days ahead of delete_at of the nearest notice sent so far"
    )
    notified_at = models.DateTimeField(help_text="When that notice was sent")

    class Meta:
        verbose_name_plural = "storage arrears"
        constraints = [
            models.CheckConstraint(
                condition=Q(delete_at__gt=F("since")), name="storagearrears_deletion_after"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account} (storage unpaid since {self.since:%Y-%m-%d})"
