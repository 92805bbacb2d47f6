"""Reads for dedicated hosts: which hosts a plan may lease, whose leases one sees, what a
leased host's container gets."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, Sum
from django.utils import translation
from django.utils.translation import gettext

from gpurental.accounts.languages import languages_of
from gpurental.baremetal.models import (
    HOLDING,
    BareMetalHost,
    DedicatedPlan,
    Lease,
    LeaseCharge,
    LeaseStatus,
)
from gpurental.billing import pricing
from gpurental.billing.models import InvoiceLine
from gpurental.billing.selectors import operator_zone
from gpurental.fleet.models import Host
from gpurental.rentals import selectors as rental_selectors
from gpurental.rentals.models import Allocation


def matching_hosts(
    *, plan: DedicatedPlan, start: datetime, end: datetime, now: datetime
) -> list[Host]:
    """Leasable hosts whose enabled GPUs are exactly ``plan.gpu_count`` of its model,
    with none of them held over [start, end), by name. A lease starting now needs a host
    that answers now; one booked ahead, an active host (it may be back by then)."""
    hosts = (
        rental_selectors.schedulable_hosts(now=now)
        if start <= now
        else rental_selectors.bookable_hosts()
    )
    period = rental_selectors.between(start, end)
    busy = Allocation.objects.filter(gpu__host=OuterRef("pk"), period__overlap=period)
    return list(
        hosts.filter(baremetal__leasable=True)
        .annotate(
            wanted=Count("gpus", filter=Q(gpus__is_enabled=True, gpus__model=plan.gpu_model)),
            enabled=Count("gpus", filter=Q(gpus__is_enabled=True)),
        )
        .filter(wanted=plan.gpu_count, enabled=plan.gpu_count)
        .exclude(Exists(busy))
        .order_by("name")
    )


def lease_price(*, plan: DedicatedPlan, start: datetime, end: datetime, reserved: bool) -> Decimal:
    """The plan's price over [start, end), per second, rounded once to cents."""
    segments = pricing.price_interval(
        start, end, pricing.Tariff.of(plan, operator_zone()), reserved=reserved
    )
    return pricing.quantize_money(pricing.total(segments))


def lease_unbilled(lease: Lease) -> Decimal:
    """What the lease will still cost: its price from where the meter stands to its end."""
    start = max(lease.start, lease.billed_until or lease.start)
    if start >= lease.end:
        return Decimal(0)
    return lease_price(plan=lease.plan, start=start, end=lease.end, reserved=lease.reserved)


def leases_committed(*, user) -> Decimal:
    """What the account's booked and active leases will still cost (not in the ledger yet):
    a lease is committed to its whole period when it is booked."""
    leases = Lease.objects.filter(user=user, status__in=HOLDING).select_related("plan")
    return sum((lease_unbilled(lease) for lease in leases), Decimal(0))


def leases_hourly_rate(*, user) -> Decimal:
    """What the account's active leases cost per hour at the full rate."""
    active = Lease.objects.filter(user=user, status=LeaseStatus.ACTIVE)
    return active.aggregate(rate=Sum("plan__hourly_rate"))["rate"] or Decimal(0)


def allows_host_network(host: Host) -> bool:
    return BareMetalHost.objects.filter(host=host, allow_host_network=True).exists()


def plans_offered():
    return DedicatedPlan.objects.filter(is_active=True).select_related("gpu_model")


def leases_visible_to(*, user):
    """The user's own leases (staff too: the admin is where staff see everyone's)."""
    return Lease.objects.filter(user=user).select_related("plan", "plan__gpu_model", "host")


def lease_visible_to(*, user, lease_id) -> Lease | None:
    return leases_visible_to(user=user).filter(pk=lease_id).first()


def lease_cost_so_far(lease: Lease) -> Decimal:
    return lease.charges.aggregate(total=Sum("amount"))["total"] or Decimal(0)


def hourly_rates(plan: DedicatedPlan) -> dict:
    """The plan's rates per hour for the console: on-demand, off-peak and reserved."""
    tariff = pricing.Tariff.of(plan, operator_zone())
    return {
        kind: pricing.quantize_money(tariff.rate(kind))
        for kind in (pricing.PEAK, pricing.OFF_PEAK, pricing.RESERVED)
    }


def dedicated_options(lease: Lease) -> dict:
    """What the start spec carries for an instance on a leased host (protocol.py's
    optional ``dedicated`` field): the whole host's CPUs and memory, a large /dev/shm,
    memlock/stack ulimits, /dev/infiniband when the host has it (the agent looks), and
    host networking when the tenant asked and the operator allows it on this host."""
    network = lease.host_network and allows_host_network(lease.host)
    return {
        "cpu_count": float(lease.plan.vcpus),
        "memory_mb": lease.plan.memory_gb * 1024,
        "shm_size_mb": settings.DEDICATED_SHM_MB,
        "host_network": bool(network),
    }


def lease_charge_entries(lease_id: int, rate_kind: str, start: datetime, end: datetime):
    """The ledger entries (ids, a subquery) of a lease's charges of one rate kind in
    [start, end): what a credit note on its invoice line pays back."""
    return LeaseCharge.objects.filter(
        lease_id=lease_id, rate_kind=rate_kind, period_start__gte=start, period_start__lt=end
    ).values("ledger_entry_id")


def lease_invoice_lines(start: datetime, end: datetime, user_ids=None) -> dict[int, list]:
    """Per user, unsaved invoice lines for the lease charges of [start, end) (a month in
    the operator's zone): one per lease and rate kind, like an instance's lines; the
    amount rounded once, here. billing.services.invoicing adds them to the month's draft."""
    charges = LeaseCharge.objects.filter(period_start__gte=start, period_start__lt=end)
    if user_ids is not None:
        charges = charges.filter(lease__user_id__in=user_ids)
    rows = (
        charges.values("lease_id", "lease__user_id", "rate_kind")
        .annotate(
            amount=Sum("amount"),
            duration=Sum(
                ExpressionWrapper(F("period_end") - F("period_start"), output_field=DurationField())
            ),
        )
        .order_by("lease__user_id", "lease_id", "rate_kind")
    )
    leases = Lease.objects.select_related("plan", "host").in_bulk({r["lease_id"] for r in rows})
    labels = dict(pricing.KIND_LABELS)
    rows = list(rows)
    languages = languages_of(row["lease__user_id"] for row in rows)
    lines: dict[int, list] = defaultdict(list)
    for row in rows:
        lease = leases[row["lease_id"]]
        hours = Decimal(row["duration"].total_seconds()) / 3600 * lease.plan.gpu_count
        with translation.override(languages.get(row["lease__user_id"])):
            description = gettext("Dedicated host %(host)s (%(plan)s), %(rate)s") % {
                "host": lease.host.name,
                "plan": lease.plan.name,
                "rate": gettext(labels.get(row["rate_kind"], row["rate_kind"])),
            }
        lines[row["lease__user_id"]].append(
            InvoiceLine(
                lease_id=lease.pk,
                rate_kind=row["rate_kind"],
                description=description[:255],
                gpu_hours=hours.quantize(Decimal("0.0001")),
                amount=pricing.quantize_money(row["amount"]),
            )
        )
    return lines
