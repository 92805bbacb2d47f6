"""Reading the storage meter: invoice lines, credit notes' debits, usage-report rows, and
what each stored thing costs a month (the console and the API show it beside the thing)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.db.models import DecimalField, ExpressionWrapper, F, Sum
from django.db.models.functions import Extract, TruncDate
from django.utils import translation
from django.utils.translation import gettext

from gpurental.accounts.languages import languages_of
from gpurental.billing.models import InvoiceLine, LedgerEntry, RateKind
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import UsageRow, operator_zone
from gpurental.storage.models import StorageCharge, StoredKind
from gpurental.storage.services import HOURS_PER_MONTH, hourly_rate, prices

GB_HOURS = Decimal("0.0001")


def monthly_cost(kind: str, gb: Decimal, rates: dict[str, Decimal] | None = None) -> Decimal:
    """What keeping ``gb`` GB of ``kind`` costs a month (730 h) at today's price."""
    rates = rates if rates is not None else prices()
    return quantize_money(hourly_rate(Decimal(gb), rates[kind]) * HOURS_PER_MONTH)


def _labels(object_ids: set) -> dict:
    """Each stored thing's name when it was last charged."""
    return dict(
        StorageCharge.objects.filter(object_id__in=object_ids)
        .order_by("object_id", "-period_end")
        .distinct("object_id")
        .values_list("object_id", "label")
    )


def storage_invoice_lines(start: datetime, end: datetime, user_ids=None) -> dict[int, list]:
    """Per user, unsaved invoice lines for the storage charged in [start, end) (a month in
    the operator's zone): one per stored thing, with its GB-hours in the description; the
    amount rounded once, here. billing.services.invoicing adds them to the month's draft."""
    charges = StorageCharge.objects.filter(period_start__gte=start, period_start__lt=end)
    if user_ids is not None:
        charges = charges.filter(account_id__in=user_ids)
    seconds = Extract(F("period_end") - F("period_start"), "epoch")
    rows = list(
        charges.values("account_id", "kind", "object_id")
        .annotate(
            amount=Sum("amount"),
            gb_hours=Sum(
                ExpressionWrapper(
                    F("gb") * seconds / 3600, output_field=DecimalField(decimal_places=6)
                )
            ),
        )
        .order_by("account_id", "kind", "object_id")
    )
    labels = _labels({r["object_id"] for r in rows})
    languages = languages_of(row["account_id"] for row in rows)
    lines: dict[int, list] = defaultdict(list)
    for row in rows:
        with translation.override(languages.get(row["account_id"])):
            description = gettext("Storage: %(kind)s %(name)s, %(gb_hours)s GB-hours") % {
                "kind": StoredKind(row["kind"]).label,
                "name": labels[row["object_id"]],
                "gb_hours": Decimal(row["gb_hours"]).quantize(Decimal("0.1")),
            }
        lines[row["account_id"]].append(
            InvoiceLine(
                stored_object_id=row["object_id"],
                rate_kind=RateKind.STORAGE,
                description=description[:255],
                gpu_hours=Decimal(0),
                amount=quantize_money(row["amount"]),
            )
        )
    return lines


def storage_charge_entries(object_id, start: datetime, end: datetime):
    """The ledger entries (ids, a subquery) of a stored thing's charges in [start, end):
    what a credit note on its invoice line pays back."""
    return StorageCharge.objects.filter(
        object_id=object_id, period_start__gte=start, period_start__lt=end
    ).values("ledger_entry_id")


def charged_so_far(kind: str, object_ids) -> dict:
    """Per stored thing, what its storage has cost in all (the console's "so far")."""
    rows = (
        StorageCharge.objects.filter(kind=kind, object_id__in=list(object_ids))
        .values("object_id")
        .annotate(total=Sum("amount"))
    )
    return {row["object_id"]: quantize_money(row["total"]) for row in rows}


def storage_line_debits(line: InvoiceLine, start: datetime, end: datetime):
    """The ledger debits behind a storage line of the month [start, end); None for a line
    that is not storage's."""
    if line.stored_object_id is None:
        return None
    return LedgerEntry.objects.filter(
        pk__in=storage_charge_entries(line.stored_object_id, start, end)
    )


def storage_usage_by_day(user_id: int, start: datetime, end: datetime) -> list[UsageRow]:
    """The account's storage charged in [start, end), per stored thing per local day, as
    usage-report rows: its kind and name, "storage" for the plan, no GPU-hours."""
    rows = list(
        StorageCharge.objects.filter(
            account_id=user_id, period_start__gte=start, period_start__lt=end
        )
        .annotate(day=TruncDate("period_start", tzinfo=operator_zone()))
        .values("day", "kind", "object_id")
        .annotate(cost=Sum("amount"))
        .order_by("day", "kind", "object_id")
    )
    labels = _labels({r["object_id"] for r in rows})
    return [
        UsageRow(
            day=row["day"],
            instance_id=str(row["object_id"]),
            instance_name=f"{StoredKind(row['kind']).label}: {labels[row['object_id']]}",
            plan=gettext("storage"),
            gpu_hours=Decimal(0),
            cost=row["cost"],
        )
        for row in rows
    ]
