"""Invoice documents: CSV and PDF, made from an invoice and its lines only.

The PDF is written by hand (no dependency): A4 pages of text in the standard
Helvetica fonts with WinAnsi (cp1252) encoding, which every PDF reader has built
in. Invoices are short tables; this is all they need.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

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

PAGE_WIDTH, PAGE_HEIGHT = 595, 842  # A4 in points
MARGIN = 56
ROWS_PER_PAGE = 38
# Advance widths (1/1000 em) of what right-aligned figures are made of, from the
# standard Helvetica metrics.
_FIGURE_WIDTHS = {**dict.fromkeys("0123456789", 556), ".": 278, ",": 278, "-": 333, " ": 278}


@dataclass
class _Text:
    x: float
    y: float
    text: str
    bold: bool = False
    size: float = 10
    right: bool = False  # x is the right edge


def _width(text: str, size: float) -> float:
    return sum(_FIGURE_WIDTHS.get(ch, 556) for ch in text) * size / 1000


def _escape(text: str) -> bytes:
    raw = text.encode("cp1252", errors="replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def invoice_pdf(
    invoice: Invoice,
    lines: Sequence[InvoiceLine],
    *,
    issuer: str,
    voucher_applied: Decimal | None = None,
) -> bytes:
    title = "Credit note" if invoice.kind == Invoice.Kind.CREDIT_NOTE else "Invoice"
    customer = invoice.user
    head = [
        _Text(MARGIN, 780, issuer, bold=True, size=16),
        _Text(MARGIN, 750, f"{title} {_number(invoice)}", bold=True, size=13),
        _Text(
            MARGIN,
            732,
            f"Period: {invoice.period_start:%Y-%m-%d} to {invoice.period_end:%Y-%m-%d} (exclusive)",
        ),
        _Text(
            MARGIN,
            718,
            f"Issued: {invoice.issued_at:%Y-%m-%d}" if invoice.issued_at else "Draft: not issued",
        ),
        _Text(MARGIN, 704, f"Status: {invoice.get_status_display()}"),
        _Text(330, 732, "Bill to:", bold=True),
        _Text(330, 718, customer.full_name or customer.email),
        _Text(330, 704, customer.company or ""),
        _Text(330, 690, customer.email),
    ]
    if invoice.corrects_id:
        head.append(_Text(MARGIN, 690, f"Corrects invoice {invoice.corrects.number}"))
    amount_x, hours_x = PAGE_WIDTH - MARGIN, PAGE_WIDTH - MARGIN - 90

    def table_head(y: float) -> list[_Text]:
        return [
            _Text(MARGIN, y, "Description", bold=True),
            _Text(hours_x, y, "GPU-hours", bold=True, right=True),
            _Text(amount_x, y, f"Amount ({invoice.currency})", bold=True, right=True),
        ]

    pages: list[list[_Text]] = []
    chunks = [lines[i : i + ROWS_PER_PAGE] for i in range(0, len(lines), ROWS_PER_PAGE)] or [[]]
    for number, chunk in enumerate(chunks, start=1):
        top = 650 if number == 1 else 780
        page = (head if number == 1 else []) + table_head(top)
        y = top - 18
        for line in chunk:
            page += [
                _Text(MARGIN, y, _clip(line.description, 68)),
                _Text(hours_x, y, f"{line.gpu_hours:,.4f}", right=True),
                _Text(amount_x, y, f"{line.amount:,.2f}", right=True),
            ]
            y -= 14
        if number == len(chunks):
            page += [
                _Text(MARGIN, y - 10, "Total", bold=True, size=11),
                _Text(amount_x, y - 10, f"{invoice.total:,.2f}", bold=True, size=11, right=True),
            ]
            if voucher_applied:
                page += [
                    _Text(MARGIN, y - 26, "Voucher credit applied (paid from vouchers)"),
                    _Text(amount_x, y - 26, f"{voucher_applied:,.2f}", right=True),
                ]
        page.append(
            _Text(MARGIN, 40, f"{_number(invoice)}, page {number} of {len(chunks)}", size=8)
        )
        pages.append(page)
    return _pdf(pages)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _content(texts: list[_Text]) -> bytes:
    out = []
    for t in texts:
        x = t.x - _width(t.text, t.size) if t.right else t.x
        font = b"/F2" if t.bold else b"/F1"
        out.append(
            b"BT %s %.1f Tf %.2f %.2f Td (%s) Tj ET" % (font, t.size, x, t.y, _escape(t.text))
        )
    return b"\n".join(out)


def _pdf(pages: list[list[_Text]]) -> bytes:
    """Objects: 1 catalog, 2 page tree, 3–4 fonts, then a page and its content per page."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /%s /Encoding /WinAnsiEncoding >>"
    objects: list[bytes] = [b"", b"", font % b"Helvetica", font % b"Helvetica-Bold"]
    kids = []
    for texts in pages:
        stream = _content(texts)
        page_id, content_id = len(objects) + 1, len(objects) + 2
        kids.append(b"%d 0 R" % page_id)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] "
            b"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents %d 0 R >>"
            % (PAGE_WIDTH, PAGE_HEIGHT, content_id)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))

    body = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(body))
        body += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        body += b"%010d 00000 n \n" % offset
    body += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(body)
