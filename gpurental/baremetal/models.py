"""Dedicated hosts: a whole GPU server leased by one tenant over [start, end).

A lease is held twice in the database, and each hold is a constraint:
- the lease row itself: ``lease_no_host_double_booking`` (host WITH =, period WITH &&,
  for booked and active leases), so two leases of one host can never overlap;
- an ``Allocation`` on every GPU of the host over the same period: the allocations'
  own exclusion constraint then refuses any on-demand launch or reservation on that
  host while the lease runs (or is booked), exactly as it refuses a double booking.
"""

import datetime as dt
import uuid
from decimal import Decimal

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class DedicatedPlan(models.Model):
    """A whole host as one offer: "8× H100, 192 vCPU, 2 TB", at an hourly rate for the host.

    A host matches the plan when it is leasable and its enabled GPUs are exactly
    ``gpu_count`` of ``gpu_model``. Prices follow the rules of ``catalog.Plan`` (the
    same ``billing.pricing.Tariff``): an off-peak discount inside a daily window in the
    operator's time zone, and a reserved discount for leases booked ahead, which
    replaces the off-peak one.
    """

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    gpu_model = models.ForeignKey("catalog.GPUModel", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField(help_text="Every GPU of the host")
    vcpus = models.PositiveSmallIntegerField(help_text="Every CPU of the host")
    memory_gb = models.PositiveIntegerField(help_text="Memory the tenant's container may use")
    hourly_rate = models.DecimalField(
        max_digits=10, decimal_places=4, help_text="Price per hour for the whole host"
    )
    off_peak_discount = models.DecimalField(max_digits=5, decimal_places=4, default=Decimal("0.30"))
    off_peak_start = models.TimeField(default=dt.time(0, 0), help_text="Operator's time zone")
    off_peak_end = models.TimeField(default=dt.time(8, 0), help_text="Operator's time zone")
    reserved_discount = models.DecimalField(max_digits=5, decimal_places=4, default=Decimal("0.15"))
    instance_plan = models.ForeignKey(
        "catalog.Plan",
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The catalog plan the lease's instances are recorded under (same GPU "
        "model); the lease, not this plan, is what is billed",
    )
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpu_model__name", "gpu_count"]
        verbose_name = "dedicated host plan"
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1), name="dedicatedplan_gpu_count_positive"
            ),
            models.CheckConstraint(
                condition=Q(hourly_rate__gte=0), name="dedicatedplan_rate_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(off_peak_discount__gte=0) & Q(off_peak_discount__lt=1),
                name="dedicatedplan_off_peak_discount_range",
            ),
            models.CheckConstraint(
                condition=Q(reserved_discount__gte=0) & Q(reserved_discount__lt=1),
                name="dedicatedplan_reserved_discount_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class BareMetalHost(models.Model):
    """A host's bare-metal settings: whether it may be leased whole, what its tenant may
    have (host networking), and its BMC."""

    host = models.OneToOneField("fleet.Host", on_delete=models.CASCADE, related_name="baremetal")
    leasable = models.BooleanField(
        default=True, help_text="Offered as a dedicated host (whole host, one tenant)"
    )
    allow_host_network = models.BooleanField(
        default=False,
        help_text="A tenant may ask for host networking (their container shares the host's "
        "network stack: for multi-node training over the host's NICs)",
    )
    bmc_url = models.CharField(
        max_length=255, blank=True, help_text="Redfish service root, e.g. https://10.0.0.5"
    )
    bmc_username = models.CharField(max_length=100, blank=True)
    # Encrypted (Fernet, keyed from BMC_SECRET_KEY): the platform must send it to the BMC,
    # so it cannot be hashed. See baremetal/secrets.py.
    bmc_password_encrypted = models.TextField(blank=True, editable=False)
    bmc_system_id = models.CharField(
        max_length=255, blank=True, help_text="Redfish system path; empty = the only system"
    )
    bmc_verify_tls = models.BooleanField(default=True)
    power_state = models.CharField(max_length=16, blank=True, help_text="As last read")
    power_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "bare-metal host"

    def __str__(self) -> str:
        return self.host.name

    @property
    def has_bmc(self) -> bool:
        return bool(self.bmc_url)


class LeaseStatus(models.TextChoices):
    BOOKED = "booked", _("Booked")
    ACTIVE = "active", _("Active")
    ENDED = "ended", _("Ended")
    CANCELLED = "cancelled", _("Cancelled")


HOLDING = (LeaseStatus.BOOKED, LeaseStatus.ACTIVE)


class Lease(models.Model):
    """One tenant's exclusive use of a whole host over [start, end)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    plan = models.ForeignKey(DedicatedPlan, on_delete=models.PROTECT, related_name="leases")
    host = models.ForeignKey("fleet.Host", on_delete=models.PROTECT, related_name="leases")
    period = DateTimeRangeField()
    status = models.CharField(
        max_length=16, choices=LeaseStatus.choices, default=LeaseStatus.BOOKED
    )
    reserved = models.BooleanField(
        help_text="Booked ahead: billed at the reserved rate (which replaces off-peak)"
    )
    host_network = models.BooleanField(default=False)
    billed_until = models.DateTimeField(null=True, blank=True, help_text="Metered up to here")
    unbilled_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The host fell silent here: not billed until it answers again",
    )
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            ExclusionConstraint(
                name="lease_no_host_double_booking",
                expressions=[("host", RangeOperators.EQUAL), ("period", RangeOperators.OVERLAPS)],
                condition=Q(status__in=["booked", "active"]),
            ),
            models.CheckConstraint(
                condition=Q(period__isempty=False)
                & Q(period__lower_inf=False)
                & Q(period__upper_inf=False),
                name="lease_period_bounded",
            ),
        ]
        indexes = [models.Index(fields=["status"]), models.Index(fields=["user", "status"])]

    def __str__(self) -> str:
        return f"{self.host.name} from {self.start:%Y-%m-%d %H:%M} UTC"

    @property
    def start(self):
        return self.period.lower

    @property
    def end(self):
        return self.period.upper


class LeaseEvent(models.Model):
    """Append-only history of a lease: created, started, ended, cancelled."""

    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="events")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    from_status = models.CharField(max_length=16, choices=LeaseStatus.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=LeaseStatus.choices)
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.to_status}"


class LeaseCharge(models.Model):
    """Metered use of a lease over one closed interval at one rate (per second).

    Unique per (lease, period_start): running the meter twice charges once.
    """

    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="charges")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    rate_kind = models.CharField(max_length=16)
    hourly_rate = models.DecimalField(max_digits=16, decimal_places=8)
    amount = models.DecimalField(max_digits=12, decimal_places=6)
    ledger_entry = models.OneToOneField(
        "billing.LedgerEntry", on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["period_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["lease", "period_start"], name="leasecharge_once_per_interval"
            ),
            models.CheckConstraint(
                condition=Q(amount__gte=0), name="leasecharge_amount_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(period_end__gt=models.F("period_start")),
                name="leasecharge_period_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.lease} {self.period_start:%Y-%m-%d %H:%M:%S} {self.amount}"


class PowerAction(models.TextChoices):
    READ = "read", "Read power state"
    ON = "on", "Power on"
    OFF = "off", "Power off"
    CYCLE = "cycle", "Power cycle"


class PowerEvent(models.Model):
    """Append-only record of every BMC power action staff took, and how it went."""

    host = models.ForeignKey("fleet.Host", on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=8, choices=PowerAction.choices)
    ok = models.BooleanField()
    power_state = models.CharField(max_length=16, blank=True, help_text="Read after the action")
    detail = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.host} {self.action} {'ok' if self.ok else 'failed'}"
