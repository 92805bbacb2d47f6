"""Monthly invoices: drafts from the charges, gap-free numbers at issue, credit notes.

A month is the operator's (settings.TIME_ZONE): charges never straddle a local
midnight (pricing cuts them there), so each belongs to the month it starts in.
An invoice has one line per instance and rate kind, one per dedicated-host lease and
rate kind (its per-second charges, gpurental/baremetal/), and one per reservation booked
in the month (paid at booking: its price less what was refunded by the time the
draft is made; a refund after the invoice is issued goes to the balance). Each
line's amount is rounded once, and the total is the sum of the rounded lines, so
what the customer reads adds up. Issued invoices never change (the database refuses it, migration 0004);
a correction is a credit note, which refunds its total to the customer's balance.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet, Sum
from django.utils import timezone, translation
from django.utils.translation import gettext

from gpurental.accounts.languages import languages_of
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.baremetal.selectors import lease_charge_entries, lease_invoice_lines
from gpurental.billing import pricing, sources
from gpurental.billing.documents import bill_to_lines
from gpurental.billing.exceptions import BillingError
from gpurental.billing.models import (
    Charge,
    Invoice,
    InvoiceCounter,
    InvoiceLine,
    InvoiceStatus,
    LedgerEntry,
)
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import charge_seconds, operator_zone
from gpurental.billing.services.refunds import refund_post
from gpurental.notifications.services import notify
from gpurental.rentals.models import Instance, Reservation

SERIES = {Invoice.Kind.INVOICE: "INV", Invoice.Kind.CREDIT_NOTE: "CN"}
HOURS = Decimal("0.0001")
USERS_PER_TRANSACTION = 500


def month_first_days(year: int, month: int) -> tuple[date, date]:
    if not 1 <= month <= 12:
        raise BillingError(f"month: {month} is not 1–12", field="month")
    following = date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)
    return date(year, month, 1), following


# --- drafts -------------------------------------------------------------------


def invoice_generate(*, user: User, year: int, month: int, now: datetime | None = None) -> Invoice:
    """The user's invoice for the month: a draft (re)built from the charges, or the
    issued one unchanged."""
    now = now or timezone.now()
    first, following = month_first_days(year, month)
    start, end = pricing.local_month(year, month, operator_zone())
    with transaction.atomic():
        invoice = _invoice_for(user.pk, first, following, now)
        if invoice.status == InvoiceStatus.DRAFT:
            rows = list(_charge_groups(Charge.objects.filter(user=user), start, end))
            booked = _reservation_lines(start, end, user_ids=[user.pk]).get(user.pk, [])
            booked += lease_invoice_lines(start, end, user_ids=[user.pk]).get(user.pk, [])
            booked += sources.lines_of(start, end, user_ids=[user.pk]).get(user.pk, [])
            _write_lines(invoice, _lines(rows, _instances(rows)) + booked)
    return invoice


def invoices_generate(*, year: int, month: int, now: datetime | None = None) -> int:
    """Drafts for every customer with charges in the month (issued ones are left alone).
    One aggregate over the month's charges, then invoices in batches of users; returns
    how many drafts were written."""
    now = now or timezone.now()
    first, following = month_first_days(year, month)
    start, end = pricing.local_month(year, month, operator_zone())
    rows = list(_charge_groups(Charge.objects.all(), start, end))
    instances = _instances(rows)
    by_user = {user_id: list(group) for user_id, group in itertools.groupby(rows, _user_of)}
    booked = _reservation_lines(start, end)
    for user_id, lines in lease_invoice_lines(start, end).items():  # dedicated hosts
        booked[user_id].extend(lines)
    for user_id, lines in sources.lines_of(start, end).items():  # storage…
        booked[user_id].extend(lines)
    for user_id in booked:
        by_user.setdefault(user_id, [])
    written = 0
    user_ids = list(by_user)
    for offset in range(0, len(user_ids), USERS_PER_TRANSACTION):
        chunk = user_ids[offset : offset + USERS_PER_TRANSACTION]
        try:
            with transaction.atomic():
                written += _generate_chunk(chunk, by_user, booked, instances, first, following, now)
        except IntegrityError:
            # Someone made one of these invoices meanwhile: go one user at a time.
            for user_id in chunk:
                with transaction.atomic():
                    invoice = _invoice_for(user_id, first, following, now)
                    if invoice.status == InvoiceStatus.DRAFT:
                        lines = _lines(by_user[user_id], instances) + booked.get(user_id, [])
                        _write_lines(invoice, _copies(lines))
                        written += 1
    return written


def _generate_chunk(chunk, by_user, booked, instances, first, following, now) -> int:
    existing = {
        invoice.user_id: invoice
        for invoice in Invoice.objects.select_for_update()
        .filter(user_id__in=chunk, kind=Invoice.Kind.INVOICE, period_start=first)
        .exclude(status=InvoiceStatus.VOID)
    }
    drafts = [i for i in existing.values() if i.status == InvoiceStatus.DRAFT]
    InvoiceLine.objects.filter(invoice__in=drafts).delete()
    fresh = Invoice.objects.bulk_create(
        _new_invoice(user_id, first, following, now) for user_id in chunk if user_id not in existing
    )
    lines = []
    for invoice in [*drafts, *fresh]:
        invoice_lines = _lines(by_user[invoice.user_id], instances) + _copies(
            booked.get(invoice.user_id, [])
        )
        for line in invoice_lines:
            line.invoice = invoice
        invoice.total = sum((line.amount for line in invoice_lines), Decimal("0.00"))
        lines.extend(invoice_lines)
    InvoiceLine.objects.bulk_create(lines, batch_size=2000)
    Invoice.objects.bulk_update([*drafts, *fresh], ["total"], batch_size=2000)
    return len(drafts) + len(fresh)


def _new_invoice(user_id, first: date, following: date, now: datetime) -> Invoice:
    return Invoice(
        user_id=user_id,
        kind=Invoice.Kind.INVOICE,
        period_start=first,
        period_end=following,
        currency=settings.BILLING_CURRENCY,
        created_at=now,
    )


def _invoice_for(user_id, first: date, following: date, now: datetime) -> Invoice:
    """The month's live (not void) invoice of the user, locked; a new draft if none."""
    live = (
        Invoice.objects.select_for_update()
        .filter(user_id=user_id, kind=Invoice.Kind.INVOICE, period_start=first)
        .exclude(status=InvoiceStatus.VOID)
    )
    invoice = live.first()
    if invoice is not None:
        return invoice
    try:
        with transaction.atomic():
            return Invoice.objects.create(
                user_id=user_id,
                kind=Invoice.Kind.INVOICE,
                period_start=first,
                period_end=following,
                currency=settings.BILLING_CURRENCY,
                created_at=now,
            )
    except IntegrityError:  # made by a concurrent run: use that one
        return live.get()


def _charge_groups(charges: QuerySet[Charge], start: datetime, end: datetime):
    return (
        charges.filter(period_start__gte=start, period_start__lt=end)
        .values("user_id", "instance_id", "rate_kind", "gpu_count")
        .annotate(seconds=Sum(charge_seconds()), amount=Sum("amount"))
        .order_by("user_id", "instance_id", "rate_kind")
    )


def _user_of(row: dict):
    return row["user_id"]


def _instances(rows: Iterable[dict]) -> dict:
    ids = {row["instance_id"] for row in rows}
    return Instance.objects.select_related("plan").in_bulk(ids)


def _lines(rows: Iterable[dict], instances: dict) -> list[InvoiceLine]:
    """An instance's line per rate kind, described in its customer's language."""
    rows = list(rows)
    labels = dict(pricing.KIND_LABELS)
    languages = languages_of(row["user_id"] for row in rows)
    lines = []
    for row in rows:
        instance = instances[row["instance_id"]]
        with translation.override(languages.get(row["user_id"])):
            description = gettext("%(instance)s (%(plan)s), %(rate)s") % {
                "instance": instance,
                "plan": instance.plan.name,
                "rate": gettext(labels[row["rate_kind"]]),
            }
        lines.append(
            InvoiceLine(
                instance_id=row["instance_id"],
                rate_kind=row["rate_kind"],
                description=description[:255],
                gpu_hours=(row["seconds"] * row["gpu_count"] / 3600).quantize(HOURS),
                amount=quantize_money(row["amount"]),
            )
        )
    return lines


def _reservation_lines(start: datetime, end: datetime, user_ids=None) -> dict[int, list]:
    """Per user, a line for each reservation booked in [start, end): its price less what was
    refunded so far (a reservation refunded in full has no line). A refund after the
    invoice is issued comes as a credit note (``reservations._refund``)."""
    reservations = Reservation.objects.filter(
        created_at__gte=start, created_at__lt=end, price__gt=F("refunded")
    ).select_related("plan", "gpu_model")
    if user_ids is not None:
        reservations = reservations.filter(user_id__in=user_ids)
    zone = operator_zone()
    reservations = list(reservations.order_by("user_id", "created_at"))
    languages = languages_of(r.user_id for r in reservations)
    lines: dict[int, list] = defaultdict(list)
    for r in reservations:
        lo, hi = r.start.astimezone(zone), r.end.astimezone(zone)
        with translation.override(languages.get(r.user_id)):
            description = gettext(
                "Reservation %(count)s× %(model)s (%(plan)s), %(start)s–%(end)s %(zone)s"
            ) % {
                "count": r.gpu_count,
                "model": r.gpu_model.short_name,
                "plan": r.plan.name,
                "start": f"{lo:%Y-%m-%d %H:%M}",
                "end": f"{hi:%Y-%m-%d %H:%M}",
                "zone": zone.key,
            }
        lines[r.user_id].append(
            InvoiceLine(
                reservation_id=r.pk,
                rate_kind=pricing.RESERVED,
                description=description[:255],
                gpu_hours=Decimal(str(r.gpu_hours)).quantize(HOURS),
                amount=quantize_money(r.price - r.refunded),
            )
        )
    return lines


def _copies(lines: Sequence[InvoiceLine]) -> list[InvoiceLine]:
    """Fresh unsaved lines (a line object is saved with one invoice only)."""
    return [
        InvoiceLine(
            instance_id=line.instance_id,
            reservation_id=line.reservation_id,
            lease_id=line.lease_id,
            stored_object_id=line.stored_object_id,
            rate_kind=line.rate_kind,
            description=line.description,
            gpu_hours=line.gpu_hours,
            amount=line.amount,
        )
        for line in lines
    ]


def _write_lines(invoice: Invoice, lines: Sequence[InvoiceLine]) -> None:
    invoice.lines.all().delete()
    for line in lines:
        line.invoice = invoice
    InvoiceLine.objects.bulk_create(lines)
    invoice.total = sum((line.amount for line in lines), Decimal("0.00"))
    invoice.save(update_fields=["total"])


# --- issue, pay, void -----------------------------------------------------------


def invoice_issue(
    *, invoice: Invoice, actor: User | None = None, now: datetime | None = None
) -> Invoice:
    """Give a draft its number (next in its series and year, without gaps) and freeze it."""
    now = now or timezone.now()
    with transaction.atomic():
        invoice = _lock(invoice)
        if invoice.status != InvoiceStatus.DRAFT:
            raise BillingError(
                f"invoice {invoice} is {invoice.status}; only drafts can be issued", field="status"
            )
        series, year = SERIES[invoice.kind], now.astimezone(operator_zone()).year
        # The counter row is the lock: numbers are taken one at a time, and a rolled-back
        # issue gives its number back, so the series has no gaps.
        InvoiceCounter.objects.bulk_create(
            [InvoiceCounter(series=series, year=year)], ignore_conflicts=True
        )
        counter = InvoiceCounter.objects.select_for_update().get(series=series, year=year)
        counter.last += 1
        counter.save(update_fields=["last"])
        invoice.number = f"{series}-{year}-{counter.last:06d}"
        invoice.total = invoice.lines.aggregate(total=Sum("amount"))["total"] or Decimal("0.00")
        invoice.status = InvoiceStatus.ISSUED
        invoice.issued_at = now
        # Who it is billed to, frozen with the rest: a later change of company name or
        # address does not rewrite an issued invoice.
        invoice.bill_to = "\n".join(bill_to_lines(invoice.user))
        invoice.save(update_fields=["number", "total", "status", "issued_at", "bill_to"])
        audit_record(
            action="invoice.issue",
            actor=actor,
            obj=invoice,
            changes={"number": invoice.number, "total": str(invoice.total)},
        )
        transaction.on_commit(lambda: notify(invoice.user, "invoice_issued", invoice=invoice))
    return invoice


def invoice_mark_paid(
    *, invoice: Invoice, actor: User | None = None, now: datetime | None = None
) -> Invoice:
    return _settle(invoice, InvoiceStatus.PAID, "paid_at", actor, now or timezone.now())


def invoice_void(
    *, invoice: Invoice, actor: User | None = None, now: datetime | None = None
) -> Invoice:
    """Cancel an issued invoice (its number stays used); the month can then be invoiced anew."""
    return _settle(invoice, InvoiceStatus.VOID, "voided_at", actor, now or timezone.now())


def _settle(invoice: Invoice, to: str, stamp: str, actor: User | None, now: datetime) -> Invoice:
    with transaction.atomic():
        invoice = _lock(invoice)
        if invoice.status == to:
            return invoice
        if invoice.status != InvoiceStatus.ISSUED:
            raise BillingError(
                f"invoice {invoice} is {invoice.status}; only issued invoices can become {to}",
                field="status",
            )
        invoice.status = to
        setattr(invoice, stamp, now)
        invoice.save(update_fields=["status", stamp])
        audit_record(action=f"invoice.{to}", actor=actor, obj=invoice)
    return invoice


def _lock(invoice: Invoice) -> Invoice:
    return Invoice.objects.select_for_update().get(pk=invoice.pk)


# --- corrections ----------------------------------------------------------------


def _debits_of(invoice: Invoice, lines: Sequence[InvoiceLine]) -> list[LedgerEntry]:
    """The ledger debits behind invoice lines: a reservation's payment, or an instance's
    or a lease's charges of that rate in the invoice's month."""
    start, end = pricing.local_month(
        invoice.period_start.year, invoice.period_start.month, operator_zone()
    )
    debits: list[LedgerEntry] = []
    for line in lines:
        if line.reservation_id is not None:
            found = LedgerEntry.objects.filter(
                reservation_id=line.reservation_id, kind=LedgerEntry.Kind.RESERVATION
            )
        elif line.instance_id is not None:
            found = LedgerEntry.objects.filter(
                charge__instance_id=line.instance_id,
                charge__rate_kind=line.rate_kind,
                charge__period_start__gte=start,
                charge__period_start__lt=end,
            )
        elif line.lease_id is not None:
            found = LedgerEntry.objects.filter(
                pk__in=lease_charge_entries(line.lease_id, line.rate_kind, start, end)
            )
        else:
            found = sources.debits_of(line, start, end)  # storage…
            if found is None:
                continue
        debits += [entry for entry in found if entry not in debits]
    return debits


def _line_key(line: InvoiceLine) -> tuple:
    """What a line charged for: its credit notes' lines have the same key."""
    return (
        line.instance_id,
        line.reservation_id,
        line.lease_id,
        line.stored_object_id,
        line.rate_kind,
    )


def invoice_credit_note(
    *,
    invoice: Invoice,
    credits: Sequence[tuple[InvoiceLine, Decimal]],
    reason: str,
    actor: User | None = None,
    now: datetime | None = None,
    refund: bool = True,
) -> Invoice:
    """Credit amounts against lines of an issued (or paid) invoice: an issued credit note
    (its own series, CN-…) whose total goes back to the customer's balance (``refund``;
    False when the caller has refunded already). A line cannot be credited more than it
    charged, over all its credit notes."""
    now = now or timezone.now()
    if not reason.strip():
        raise BillingError("reason: say why the invoice is corrected", field="reason")
    if not credits:
        raise BillingError("credits: name at least one line to credit", field="credits")
    with transaction.atomic():
        original = _lock(invoice)
        if original.kind != Invoice.Kind.INVOICE or original.status not in (
            InvoiceStatus.ISSUED,
            InvoiceStatus.PAID,
        ):
            raise BillingError(
                f"{original} is a {original.status} {original.kind}; only issued or paid "
                "invoices can be credited",
                field="invoice",
            )
        credited: dict[tuple, Decimal] = defaultdict(Decimal)
        for line in InvoiceLine.objects.filter(
            invoice__corrects=original, invoice__kind=Invoice.Kind.CREDIT_NOTE
        ).exclude(invoice__status=InvoiceStatus.VOID):
            credited[_line_key(line)] += line.amount
        notes = []
        for line, amount in credits:
            amount = Decimal(amount)
            key = _line_key(line)
            if line.invoice_id != original.pk:
                raise BillingError(f"line {line.pk} is not on {original}", field="credits")
            if amount <= 0 or amount != quantize_money(amount):
                raise BillingError(f"amount: {amount} must be positive, in cents", field="credits")
            left = line.amount - credited[key]
            if amount > left:
                raise BillingError(
                    f"amount: {amount} is more than the {left} left to credit on "
                    f"“{line.description}”",
                    field="credits",
                )
            credited[key] += amount
            hours = line.gpu_hours * amount / line.amount if line.amount else Decimal(0)
            notes.append(
                InvoiceLine(
                    instance_id=line.instance_id,
                    reservation_id=line.reservation_id,
                    lease_id=line.lease_id,
                    stored_object_id=line.stored_object_id,
                    rate_kind=line.rate_kind,
                    description=f"Credit: {line.description}. {reason.strip()}"[:255],
                    gpu_hours=hours.quantize(HOURS),
                    amount=amount,
                )
            )
        note = Invoice.objects.create(
            user_id=original.user_id,
            kind=Invoice.Kind.CREDIT_NOTE,
            corrects=original,
            period_start=original.period_start,
            period_end=original.period_end,
            currency=original.currency,
            created_at=now,
        )
        _write_lines(note, notes)
        note = invoice_issue(invoice=note, actor=actor, now=now)
        if refund:
            # Back to where it came from: voucher credit that paid these lines returns to
            # its voucher, with its expiry (billing.services.refunds).
            refund_post(
                user=original.user,
                debits=_debits_of(original, [line for line, _amount in credits]),
                amount=note.total,
                description=f"credit note {note.number} for {original.number}: {reason.strip()}",
                actor=actor,
                now=now,
            )
        audit_record(
            action="invoice.credit_note",
            actor=actor,
            obj=original,
            changes={"credit_note": note.number, "total": str(note.total), "reason": reason},
        )
    return note
