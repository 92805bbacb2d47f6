"""Reads: balances, the low-balance warning, usage reports."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Case, DecimalField, ExpressionWrapper, F, Func, Q, Sum, When
from django.db.models.functions import TruncDate

from gpurental.accounts.models import User
from gpurental.baremetal.models import Lease, LeaseStatus
from gpurental.billing import sources
from gpurental.billing.models import Charge, Invoice, InvoiceStatus, LedgerEntry
from gpurental.billing.pricing import Tariff, local_month, price_interval, quantize_money, total
from gpurental.rentals.models import Instance, InstanceStatus

# Instances that cost money now or are about to: the balance must carry them.
ACTIVE = (InstanceStatus.PENDING, InstanceStatus.PROVISIONING, InstanceStatus.RUNNING)


def operator_zone() -> ZoneInfo:
    """The zone off-peak windows and invoice months are in (settings.TIME_ZONE)."""
    return ZoneInfo(settings.TIME_ZONE)


def balance_of(*, user: User) -> Decimal:
    return LedgerEntry.objects.filter(user=user).aggregate(total=Sum("amount"))["total"] or Decimal(
        "0"
    )


def hourly_burn_of(*, user: User, leases: bool = True) -> Decimal:
    """What the user's metered use costs per hour at the full (peak) rate: active on-demand
    instances (reserved ones were paid at booking; those on a dedicated host are billed
    through its lease) and, with ``leases``, active dedicated-host leases."""
    run_rate = Case(
        When(without_gpus=True, then=F("plan__no_gpu_hourly_rate")), default=F("plan__hourly_rate")
    )
    rate = metered_instances().filter(user=user).aggregate(rate=Sum(run_rate))["rate"] or Decimal(
        "0"
    )
    if leases:
        from gpurental.baremetal.selectors import leases_hourly_rate  # baremetal reads billing

        rate += leases_hourly_rate(user=user)
    return rate


def metered_instances():
    """Active instances billed as they run (a reservation's was paid at booking; one on a
    dedicated host is billed through its lease)."""
    return Instance.objects.filter(status__in=ACTIVE, reservation__isnull=True, lease__isnull=True)


def spending_accounts():
    """Accounts whose use is billed as it runs now: metered instances or active dedicated-
    host leases. The low-balance warning and the credit-limit stop are for these."""
    leases = Lease.objects.filter(status=LeaseStatus.ACTIVE)
    return User.objects.filter(
        Q(pk__in=metered_instances().values("user")) | Q(pk__in=leases.values("user"))
    )


@dataclass(frozen=True)
class BalanceStatus:
    balance: Decimal
    credit_limit: Decimal
    hourly_burn: Decimal
    hours_left: Decimal | None  # at the current burn; None when nothing runs
    low: bool  # show the customer a warning


def balance_status(*, user: User) -> BalanceStatus:
    """The low-balance flag: nothing left to spend, or less than
    ``BILLING_LOW_BALANCE_HOURS`` of what is running now."""
    balance = balance_of(user=user)
    burn = hourly_burn_of(user=user)
    available = balance + user.credit_limit
    hours_left = max(available, Decimal(0)) / burn if burn else None
    low = available <= 0 or (
        hours_left is not None and hours_left < settings.BILLING_LOW_BALANCE_HOURS
    )
    return BalanceStatus(balance, user.credit_limit, burn, hours_left, low)


class EpochSeconds(Func):
    """Seconds of a PostgreSQL interval, exactly (numeric)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = DecimalField(max_digits=20, decimal_places=6)


def charge_seconds() -> ExpressionWrapper:
    return ExpressionWrapper(
        EpochSeconds(F("period_end") - F("period_start")),
        output_field=DecimalField(max_digits=20, decimal_places=6),
    )


@dataclass(frozen=True)
class UsageRow:
    day: date
    instance_id: str
    instance_name: str
    plan: str
    gpu_hours: Decimal
    cost: Decimal  # unrounded (6 places, the charges' own)


def usage_by_day(*, user: User, start: datetime, end: datetime) -> list[UsageRow]:
    """GPU-hours and cost per instance per local day, for charges starting in [start, end),
    and what other apps charge (storage: a row per stored thing per day, sources.usage_of),
    by day."""
    rows = list(_gpu_usage_by_day(user=user, start=start, end=end))
    rows += sources.usage_of(user.pk, start, end)
    return sorted(rows, key=lambda row: row.day)  # stable: each day's GPU rows first


def _gpu_usage_by_day(*, user: User, start: datetime, end: datetime) -> Iterator[UsageRow]:
    rows = (
        Charge.objects.filter(user=user, period_start__gte=start, period_start__lt=end)
        .annotate(day=TruncDate("period_start", tzinfo=operator_zone()))
        .values("day", "instance_id", "instance__name", "instance__plan__name", "gpu_count")
        .annotate(seconds=Sum(charge_seconds()), cost=Sum("amount"))
        .order_by("day", "instance__created_at", "instance_id")
    )
    for row in rows:
        name = row["instance__name"] or f"instance {str(row['instance_id'])[:8]}"
        yield UsageRow(
            day=row["day"],
            instance_id=str(row["instance_id"]),
            instance_name=name,
            plan=row["instance__plan__name"],
            gpu_hours=row["seconds"] * row["gpu_count"] / 3600,
            cost=row["cost"],
        )


def invoices_visible_to(*, user: User):
    """A customer's invoices and credit notes; drafts are the operator's business."""
    return Invoice.objects.filter(user=user).exclude(status=InvoiceStatus.DRAFT)


@dataclass(frozen=True)
class MonthSpend:
    charged: Decimal  # metered charges in the month so far
    reserved: Decimal  # reservations booked in the month, less their refunds
    unbilled: Decimal  # running time the meter has not charged yet (priced the same way)
    total: Decimal
    forecast: Decimal  # the total if what runs now keeps running to the end of the month
    month_end: datetime


def month_spend(*, user: User, now: datetime) -> MonthSpend:
    """This month's spend, live: the charges, the reservations, and what runs now priced to
    this second by the same rules as the meter; the forecast prices it on to the month's end."""
    zone = operator_zone()
    local = now.astimezone(zone)
    start, end = local_month(local.year, local.month, zone)
    charged = Charge.objects.filter(
        user=user, period_start__gte=start, period_start__lt=end
    ).aggregate(total=Sum("amount"))["total"] or Decimal(0)
    charged += sum((row.cost for row in sources.usage_of(user.pk, start, end)), Decimal(0))
    booked = LedgerEntry.objects.filter(
        user=user,
        kind__in=(LedgerEntry.Kind.RESERVATION, LedgerEntry.Kind.REFUND),
        reservation__isnull=False,
        created_at__gte=start,
        created_at__lt=end,
    ).aggregate(total=Sum("amount"))["total"] or Decimal(0)
    unbilled = ahead = Decimal(0)
    running = Instance.objects.filter(
        user=user, status__in=ACTIVE, reservation__isnull=True, running_since__isnull=False
    ).select_related("plan")
    for instance in running:
        unbilled += unbilled_cost(instance, now=now, since=start)
        ahead += total(price_interval(now, end, Tariff.of(instance.plan, zone)))
    spent = charged - booked + unbilled
    return MonthSpend(
        charged=quantize_money(charged),
        reserved=quantize_money(-booked),
        unbilled=quantize_money(unbilled),
        total=quantize_money(spent),
        forecast=quantize_money(spent + ahead),
        month_end=end,
    )


def unbilled_cost(instance: Instance, *, now: datetime, since: datetime | None = None) -> Decimal:
    """What the meter will charge for the instance's run up to ``now`` (same prices, exact)."""
    if instance.reservation_id is not None or instance.running_since is None:
        return Decimal(0)
    if instance.status not in ACTIVE or instance.stopped_at is not None:
        end = instance.stopped_at or instance.status_changed_at
    else:
        end = now
    start = max(instance.running_since, instance.billed_until or instance.running_since)
    if since is not None:
        start = max(start, since)
    return total(price_interval(start, end, Tariff.of(instance.plan, operator_zone())))


def instance_cost(*, instance: Instance, now: datetime) -> Decimal:
    """Charged so far plus what runs and is not charged yet, to the cent."""
    charged = Charge.objects.filter(instance=instance).aggregate(total=Sum("amount"))["total"]
    return quantize_money((charged or Decimal(0)) + unbilled_cost(instance, now=now))
