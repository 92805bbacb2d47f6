"""The invoice PDF speaks its customer's language (User.language, else English): labels
in Chinese for a zh-hans customer, beside a Chinese company name, all read back."""

import io
from datetime import UTC, date, datetime
from decimal import Decimal

from pypdf import PdfReader

from gpurental.billing import documents
from gpurental.billing.models import Invoice, InvoiceLine
from gpurental.billing.services.details import billing_details_update
from gpurental.billing.services.invoicing import invoice_issue

COMPANY = "上海星河智算科技有限公司"


def issued_invoice(user, *, description="训练任务 train-1 (H100 ×2)", amount="1234.50"):
    """October 2026's invoice in CNY with one line, issued on 2 November."""
    invoice = Invoice.objects.create(
        user=user, period_start=date(2026, 10, 1), period_end=date(2026, 11, 1), currency="CNY"
    )
    InvoiceLine.objects.create(
        invoice=invoice,
        rate_kind="peak",
        description=description,
        gpu_hours=Decimal("4"),
        amount=Decimal(amount),
    )
    return invoice_issue(invoice=invoice, now=datetime(2026, 11, 2, 9, tzinfo=UTC))


def _text(invoice) -> str:
    pdf = documents.invoice_pdf(invoice, list(invoice.lines.all()), issuer="示例算力云")
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


def test_a_zh_hans_customers_invoice_has_chinese_labels_and_company(alice):
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    customer = billing_details_update(
        user=alice, full_name="李娜", company=COMPANY, billing_address="上海市浦东新区世纪大道100号"
    )
    text = _text(issued_invoice(customer))
    for expected in (
        COMPANY,
        "李娜",
        "发票 INV-",
        "购买方：",
        "开具日期：2026-11-02",
        "合计",
        "1,234.50",
    ):
        assert expected in text, expected
    assert "金额（CNY）" in text
    assert "Bill to" not in text and "Total" not in text


def test_without_a_choice_the_invoice_stays_english(alice):
    alice = billing_details_update(
        user=alice, full_name="Li Na", company=COMPANY, billing_address=""
    )
    text = _text(issued_invoice(alice))
    assert "Bill to:" in text and "Total" in text and COMPANY in text
    assert "购买方" not in text
