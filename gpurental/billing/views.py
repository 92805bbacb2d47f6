"""The customer's billing pages: invoices (PDF, CSV) and a usage report. Owners only:
anyone else gets 404, as if the invoice did not exist."""

from __future__ import annotations

import csv
import io
from datetime import date

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.billing import documents, pricing
from gpurental.billing.models import Invoice
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import (
    balance_status,
    invoices_visible_to,
    month_spend,
    operator_zone,
    usage_by_day,
)
from gpurental.billing.services.vouchers import voucher_applied_between
from gpurental.teams.acting import account_of


def _voucher_applied(invoice: Invoice):
    """Voucher credit that paid for this invoice's month (shown apart from the total)."""
    if invoice.kind != Invoice.Kind.INVOICE:
        return None
    zone = operator_zone()
    start, end = pricing.local_month(invoice.period_start.year, invoice.period_start.month, zone)
    return voucher_applied_between(user=invoice.user, start=start, end=end) or None


def invoice_document_response(invoice: Invoice, fmt: str) -> HttpResponse:
    """The invoice as a PDF or CSV download."""
    lines = list(invoice.lines.order_by("id"))
    name = invoice.number or f"draft-{invoice.pk}"
    applied = _voucher_applied(invoice)
    if fmt == "pdf":
        body = documents.invoice_pdf(
            invoice, lines, issuer=settings.BILLING_ISSUER, voucher_applied=applied
        )
        response = HttpResponse(body, content_type="application/pdf")
    elif fmt == "csv":
        response = HttpResponse(
            documents.invoice_csv(invoice, lines, voucher_applied=applied),
            content_type="text/csv; charset=utf-8",
        )
    else:
        raise Http404(_("Unknown format: pdf or csv."))
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


@login_required
def invoice_list(request):
    """Balance, this month's spend and forecast, the usage report (?month=YYYY-MM), invoices."""
    try:
        year, month = _month(request.GET.get("month"))
        start, end = pricing.local_month(year, month, operator_zone())
    except (ValueError, OverflowError):
        year, month = _month(None)
        start, end = pricing.local_month(year, month, operator_zone())
    usage = [
        {**row.__dict__, "cost": quantize_money(row.cost)}
        for row in usage_by_day(user=account_of(request), start=start, end=end)
    ]
    return render(
        request,
        "billing/invoices.html",
        {
            "invoices": invoices_visible_to(user=account_of(request)).order_by(
                "-period_start", "-id"
            ),
            "status": balance_status(user=account_of(request)),
            "spend": month_spend(user=account_of(request), now=timezone.now()),
            "usage": usage,
            "usage_month": f"{year}-{month:02d}",
            "usage_hours": sum((row["gpu_hours"] for row in usage), 0),
            "usage_cost": sum((row["cost"] for row in usage), 0),
            "currency": settings.BILLING_CURRENCY,
        },
    )


@login_required
def invoice_document(request, pk: int, fmt: str):
    invoice = invoices_visible_to(user=account_of(request)).filter(pk=pk).first()
    if invoice is None:
        raise Http404(_("No such invoice."))
    return invoice_document_response(invoice, fmt)


@login_required
def usage_csv(request):
    """GPU-hours and cost per instance per day, for ?month=YYYY-MM (default: this month)."""
    try:
        year, month = _month(request.GET.get("month"))
        start, end = pricing.local_month(year, month, operator_zone())
    except (ValueError, OverflowError):
        return HttpResponseBadRequest(
            _("month: use YYYY-MM, e.g. 2026-10"), content_type="text/plain; charset=utf-8"
        )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["day", "instance", "instance_name", "plan", "gpu_hours", "cost", "currency"])
    for row in usage_by_day(user=account_of(request), start=start, end=end):
        writer.writerow(
            [
                row.day,
                row.instance_id,
                documents.csv_cell(row.instance_name),
                row.plan,
                f"{row.gpu_hours:.4f}",
                quantize_money(row.cost),
                settings.BILLING_CURRENCY,
            ]
        )
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{year}-{month:02d}.csv"'
    return response


def _month(text: str | None) -> tuple[int, int]:
    if not text:
        today = timezone.now().astimezone(operator_zone())
        return today.year, today.month
    first = date.fromisoformat(f"{text}-01")  # ValueError when it is not YYYY-MM
    return first.year, first.month
