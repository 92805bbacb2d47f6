"""Invoice documents: CSV and PDF, made from an invoice and its lines only.

The PDF is drawn with reportlab in one TrueType font that has both Latin and CJK
glyphs (``INVOICE_FONT``: WenQuanYi Zen Hei from Debian's ``fonts-wqy-zenhei`` by
default), embedded as a subset with its Unicode map, so that a Chinese company name or
address prints and can be searched and copied. Noto Sans CJK (``fonts-noto-cjk``) is
not the default because its outlines are PostScript (CFF), which reportlab's TTFont
refuses ("postscript outlines are not supported"); any TrueType-outline font works.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from decimal import Decimal
from functools import cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import translation
from django.utils.translation import gettext as _
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFError, TTFont
from reportlab.pdfgen.canvas import Canvas

from gpurental.accounts.languages import language_for
from gpurental.accounts.models import User
from gpurental.billing.models import Invoice, InvoiceLine

CSV_HEADER = [
    "invoice",
    "kind",
    "period_start",
    "period_end",
    "description",
    "instance",
    "reservation",
    "rate_kind",
    "gpu_hours",
    "amount",
    "currency",
]


def csv_cell(value) -> str:
    text = "" if value is None else str(value)
    # Instance names are the customer's: keep spreadsheets from running them as formulas.
    if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
    except ArithmeticError:
        return False
    return True


def invoice_csv(
    invoice: Invoice, lines: Sequence[InvoiceLine], *, voucher_applied: Decimal | None = None
) -> str:
    """One row per line, then a ``Total`` row whose amount is the invoice total, then (when
    vouchers paid part of it) a ``Voucher credit applied`` row, shown apart."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_HEADER)
    head = [_number(invoice), invoice.kind, invoice.period_start, invoice.period_end]
    for line in lines:
        writer.writerow(
            [
                csv_cell(v)
                for v in [
                    *head,
                    line.description,
                    line.instance_id or "",
                    line.reservation_id or "",
                    line.rate_kind,
                    line.gpu_hours,
                    line.amount,
                    invoice.currency,
                ]
            ]
        )
    hours = sum((line.gpu_hours for line in lines), Decimal("0"))
    writer.writerow(
        [csv_cell(v) for v in [*head, "Total", "", "", "", hours, invoice.total, invoice.currency]]
    )
    if voucher_applied:
        row = [*head, "Voucher credit applied", "", "", "", "", voucher_applied, invoice.currency]
        writer.writerow([csv_cell(v) for v in row])
    return out.getvalue()


def _number(invoice: Invoice) -> str:
    return invoice.number or "DRAFT"


# --- PDF ------------------------------------------------------------------------

PAGE_WIDTH, PAGE_HEIGHT = A4  # 595.27 × 841.89 points
MARGIN = 56
ROWS_PER_PAGE = 38
BILL_TO_X = 330
BILL_TO_MAX_LINES = 8
FONT_NAME = "InvoiceSans"
FONT_PACKAGE = "fonts-wqy-zenhei"


@cache
def invoice_font() -> str:
    """Register the invoice font with reportlab once per process; a clear error if the
    file is missing or not a TrueType font (the package to install is named)."""
    path = Path(settings.INVOICE_FONT)
    if not path.is_file():
        raise ImproperlyConfigured(
            f"INVOICE_FONT {path} does not exist: invoices need a TrueType font with CJK "
            f"glyphs. Install Debian's {FONT_PACKAGE} (apt-get install {FONT_PACKAGE}) or "
            "point INVOICE_FONT at another TrueType (not CFF/OpenType-PS) font file."
        )
    try:
        font = TTFont(FONT_NAME, str(path), subfontIndex=settings.INVOICE_FONT_INDEX)
    except TTFError as exc:
        raise ImproperlyConfigured(
            f"INVOICE_FONT {path} cannot be embedded ({exc}). Use a TrueType font such as "
            f"Debian's {FONT_PACKAGE} (/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc)."
        ) from exc
    pdfmetrics.registerFont(font)
    return FONT_NAME


def bill_to_lines(user: User) -> list[str]:
    """Who the invoice is for, one item per line: name (or e-mail), company, the postal
    address as typed, and the e-mail. Snapshotted on the invoice when it is issued."""
    lines = [user.full_name or user.email, user.company]
    lines += user.billing_address.splitlines()
    lines.append(user.email)
    return [line.strip() for line in lines if line and line.strip()]


def _bill_to(invoice: Invoice) -> list[str]:
    # Issued invoices print what was true on the day; drafts (and invoices issued before
    # the snapshot existed) read the profile.
    return invoice.bill_to.splitlines() if invoice.bill_to else bill_to_lines(invoice.user)


def _wrap(text: str, width: float, size: float) -> list[str]:
    """Lines no wider than ``width``: broken at spaces where there are some, and between
    characters where there are none (Chinese is written without spaces)."""
    out = []
    for line in simpleSplit(text, FONT_NAME, size, width):
        while pdfmetrics.stringWidth(line, FONT_NAME, size) > width:
            cut = len(line) - 1
            while cut > 1 and pdfmetrics.stringWidth(line[:cut], FONT_NAME, size) > width:
                cut -= 1
            out.append(line[:cut])
            line = line[cut:]
        out.append(line)
    return out


def _fit(text: str, width: float, size: float) -> str:
    """The text, cut with an ellipsis to fit ``width`` points (CJK glyphs are wide)."""
    if pdfmetrics.stringWidth(text, FONT_NAME, size) <= width:
        return text
    while text and pdfmetrics.stringWidth(text + "…", FONT_NAME, size) > width:
        text = text[:-1]
    return text + "…"


class _Page:
    """Text on a canvas in the invoice font; bold is the same glyphs filled and stroked
    (the CJK font has one weight)."""

    def __init__(self, canvas: Canvas):
        self.canvas = canvas

    def text(self, x, y, text, *, size=10.0, bold=False, right=False):
        c = self.canvas
        if right:
            x -= pdfmetrics.stringWidth(text, FONT_NAME, size)
        t = c.beginText(x, y)
        t.setFont(FONT_NAME, size)
        if bold:
            c.setLineWidth(size / 30)
            t.setTextRenderMode(2)
        t.textOut(text)
        c.drawText(t)


def invoice_pdf(
    invoice: Invoice,
    lines: Sequence[InvoiceLine],
    *,
    issuer: str,
    voucher_applied: Decimal | None = None,
) -> bytes:
    """The invoice in its customer's language (User.language, else English): whoever
    downloads it, the document is the customer's."""
    with translation.override(language_for(invoice.user)):
        return _invoice_pdf(invoice, lines, issuer=issuer, voucher_applied=voucher_applied)


def _invoice_pdf(
    invoice: Invoice,
    lines: Sequence[InvoiceLine],
    *,
    issuer: str,
    voucher_applied: Decimal | None,
) -> bytes:
    invoice_font()
    title = _("Credit note") if invoice.kind == Invoice.Kind.CREDIT_NOTE else _("Invoice")
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=A4, pageCompression=1, invariant=1)
    canvas.setTitle(f"{title} {_number(invoice)}")
    canvas.setAuthor(issuer)
    page = _Page(canvas)
    amount_x, hours_x = PAGE_WIDTH - MARGIN, PAGE_WIDTH - MARGIN - 90
    description_width = hours_x - 70 - MARGIN

    width = PAGE_WIDTH - MARGIN - BILL_TO_X
    bill_to = [part for item in _bill_to(invoice) for part in _wrap(item, width, 10)][
        :BILL_TO_MAX_LINES
    ]
    # A long address moves the table down; the first page then holds fewer rows.
    first_top = min(650, 718 - 14 * len(bill_to) - 12)
    first_rows = ROWS_PER_PAGE - math.ceil((650 - first_top) / 14)

    def first_page_head() -> None:
        page.text(MARGIN, 780, _fit(issuer, PAGE_WIDTH - 2 * MARGIN, 16), bold=True, size=16)
        page.text(MARGIN, 750, f"{title} {_number(invoice)}", bold=True, size=13)
        page.text(
            MARGIN,
            732,
            _("Period: %(start)s to %(end)s (exclusive)")
            % {
                "start": f"{invoice.period_start:%Y-%m-%d}",
                "end": f"{invoice.period_end:%Y-%m-%d}",
            },
        )
        issued = (
            _("Issued: %(day)s") % {"day": f"{invoice.issued_at:%Y-%m-%d}"}
            if invoice.issued_at
            else _("Draft: not issued")
        )
        page.text(MARGIN, 718, issued)
        page.text(MARGIN, 704, _("Status: %(status)s") % {"status": invoice.get_status_display()})
        if invoice.corrects_id:
            page.text(
                MARGIN,
                690,
                _("Corrects invoice %(number)s") % {"number": invoice.corrects.number},
            )
        page.text(BILL_TO_X, 732, _("Bill to:"), bold=True)
        for n, item in enumerate(bill_to):
            page.text(BILL_TO_X, 718 - 14 * n, item)

    def table_head(y: float) -> None:
        page.text(MARGIN, y, _("Description"), bold=True)
        page.text(hours_x, y, _("GPU-hours"), bold=True, right=True)
        amount = _("Amount (%(currency)s)") % {"currency": invoice.currency}
        page.text(amount_x, y, amount, bold=True, right=True)

    rest = lines[first_rows:]
    chunks = [lines[:first_rows]]
    chunks += [rest[i : i + ROWS_PER_PAGE] for i in range(0, len(rest), ROWS_PER_PAGE)]
    for number, chunk in enumerate(chunks, start=1):
        if number == 1:
            first_page_head()
        top = first_top if number == 1 else 780
        table_head(top)
        y = top - 18
        for line in chunk:
            page.text(MARGIN, y, _fit(line.description, description_width, 10))
            page.text(hours_x, y, f"{line.gpu_hours:,.4f}", right=True)
            page.text(amount_x, y, f"{line.amount:,.2f}", right=True)
            y -= 14
        if number == len(chunks):
            page.text(MARGIN, y - 10, _("Total"), bold=True, size=11)
            page.text(amount_x, y - 10, f"{invoice.total:,.2f}", bold=True, size=11, right=True)
            if voucher_applied:
                page.text(MARGIN, y - 26, _("Voucher credit applied (paid from vouchers)"))
                page.text(amount_x, y - 26, f"{voucher_applied:,.2f}", right=True)
        footer = _("%(invoice)s, page %(page)s of %(pages)s") % {
            "invoice": _number(invoice),
            "page": number,
            "pages": len(chunks),
        }
        page.text(MARGIN, 40, footer, size=8)
        canvas.showPage()
    canvas.save()
    return out.getvalue()
