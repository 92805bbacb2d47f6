"""Reports for the operator: revenue per local day and per GPU model.

Revenue is counted when it is earned or paid: on-demand use by its charges (on the
local day the charged interval starts, as invoices do), reservations on the day they
were paid (booked), and their refunds on the day they were paid back. Net is
on-demand + reserved − refunds. GPU-hours are the metered on-demand ones plus those
of the reservations paid that day that were not cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db.models import DecimalField, ExpressionWrapper, F, Sum
from django.db.models.functions import TruncDate

from gpurental.billing.models import Charge, LedgerEntry, RateKind
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import charge_seconds
from gpurental.rentals.models import ReservationStatus

ZERO = Decimal("0")


@dataclass
class RevenueRow:
    """One day or one GPU model. Amounts are exact (the charges' 6 places); round to show."""

    key: date | str
    on_demand: Decimal = ZERO
    reserved: Decimal = ZERO
    refunds: Decimal = ZERO
    gpu_hours: Decimal = ZERO

    @property
    def net(self) -> Decimal:
        return self.on_demand + self.reserved - self.refunds

    def add(self, other: RevenueRow) -> None:
        self.on_demand += other.on_demand
        self.reserved += other.reserved
        self.refunds += other.refunds
        self.gpu_hours += other.gpu_hours

    def rounded(self) -> dict:
        return {
            "on_demand": quantize_money(self.on_demand),
            "reserved": quantize_money(self.reserved),
            "refunds": quantize_money(self.refunds),
            "net": quantize_money(self.net),
            "gpu_hours": quantize_money(self.gpu_hours, 1),
        }


@dataclass
class RevenueReport:
    start: datetime  # UTC, inclusive
    end: datetime  # UTC, exclusive
    days: list[RevenueRow]  # every local day of [start, end), in order
    models: list[RevenueRow]  # GPU models with any revenue, by name
    total: RevenueRow = field(default_factory=lambda: RevenueRow("total"))


def revenue_report(*, start: datetime, end: datetime, zone: ZoneInfo) -> RevenueReport:
    """Revenue over [start, end) (local midnights as UTC, e.g. ``pricing.local_month``)."""
    days: dict[date, RevenueRow] = {}
    day = start.astimezone(zone).date()
    while day < end.astimezone(zone).date():
        days[day] = RevenueRow(day)
        day += timedelta(days=1)
    models: dict[str, RevenueRow] = {}

    def rows(day_key: date, model: str) -> tuple[RevenueRow, RevenueRow]:
        return days.setdefault(day_key, RevenueRow(day_key)), models.setdefault(
            model, RevenueRow(model)
        )

    gpu_seconds = ExpressionWrapper(
        charge_seconds() * F("gpu_count"),
        output_field=DecimalField(max_digits=24, decimal_places=6),
    )
    charges = (
        Charge.objects.filter(period_start__gte=start, period_start__lt=end)
        .annotate(day=TruncDate("period_start", tzinfo=zone))
        .values("day", "instance__gpu_model__name", "rate_kind")
        .annotate(amount=Sum("amount"), gpu_seconds=Sum(gpu_seconds))
    )
    for c in charges:
        hours = ZERO if c["rate_kind"] == RateKind.STORAGE else c["gpu_seconds"] / 3600
        for r in rows(c["day"], c["instance__gpu_model__name"]):
            r.on_demand += c["amount"]
            r.gpu_hours += hours

    entries = (
        LedgerEntry.objects.filter(
            created_at__gte=start,
            created_at__lt=end,
            reservation__isnull=False,
            kind__in=(LedgerEntry.Kind.RESERVATION, LedgerEntry.Kind.REFUND),
        )
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .select_related("reservation__gpu_model")
        .only(
            "kind",
            "amount",
            "created_at",
            "reservation__period",
            "reservation__gpu_count",
            "reservation__status",
            "reservation__gpu_model__name",
        )
    )
    for entry in entries:
        reservation = entry.reservation
        for r in rows(entry.day, reservation.gpu_model.name):
            if entry.kind == LedgerEntry.Kind.REFUND:
                r.refunds += entry.amount
            else:
                r.reserved -= entry.amount  # a debit of the customer: revenue
                if reservation.status != ReservationStatus.CANCELLED:
                    r.gpu_hours += _gpu_hours(reservation)

    report = RevenueReport(
        start=start,
        end=end,
        days=[days[d] for d in sorted(days)],
        models=[models[m] for m in sorted(models)],
    )
    for day_row in report.days:
        report.total.add(day_row)
    return report


def _gpu_hours(reservation) -> Decimal:
    seconds = (reservation.end - reservation.start) // timedelta(microseconds=1)
    return Decimal(seconds) * reservation.gpu_count / 3_600_000_000
