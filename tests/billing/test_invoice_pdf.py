"""Invoice PDFs drawn by reportlab in a CJK TrueType font: a Chinese company name and
address print, are read back by a PDF text extractor, stay as issued when the profile
changes, and a missing font fails with the package to install."""

import io
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse
from pypdf import PdfReader

from gpurental.accounts.models import AuditEvent
from gpurental.billing import documents
from gpurental.billing.models import Invoice, InvoiceLine
from gpurental.billing.services.details import billing_details_update
from gpurental.billing.services.invoicing import invoice_issue

COMPANY = "北京深度求索科技有限公司"
ADDRESS = "北京市海淀区中关村大街1号\n邮编 100080"
ISSUE_DAY = datetime(2026, 11, 2, 9, tzinfo=UTC)


@pytest.fixture
def chinese_customer(alice):
    return billing_details_update(
        user=alice, full_name="张伟", company=COMPANY, billing_address=ADDRESS
    )


def draft_for(user, lines=(("训练任务 train-1 (H100 ×2)", "4.0000", "16.00"),), month=10):
    invoice = Invoice.objects.create(
        user=user, period_start=date(2026, month, 1), period_end=date(2026, month + 1, 1)
    )
    InvoiceLine.objects.bulk_create(
        InvoiceLine(
            invoice=invoice,
            rate_kind="peak",
            description=d,
            gpu_hours=Decimal(h),
            amount=Decimal(a),
        )
        for d, h, a in lines
    )
    return invoice


def read_back(pdf: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


def test_a_chinese_company_name_and_address_are_on_the_pdf_and_read_back(chinese_customer):
    issued = invoice_issue(invoice=draft_for(chinese_customer), now=ISSUE_DAY)
    pdf = documents.invoice_pdf(issued, list(issued.lines.all()), issuer="示例算力云 GPU Cloud")
    text = read_back(pdf)
    for expected in (
        COMPANY,
        "北京市海淀区中关村大街1号",
        "邮编 100080",
        "张伟",
        "示例算力云 GPU Cloud",
        "训练任务 train-1 (H100 ×2)",
        "alice@example.com",
        "Invoice INV-2026-000001",
        "16.00",
    ):
        assert expected in text, expected
    # The glyphs travel with the file: a subset of the configured TrueType font.
    font = PdfReader(io.BytesIO(pdf)).pages[0]["/Resources"]["/Font"]
    names = {str(f.get_object()["/BaseFont"]) for f in font.values()}
    assert any("WenQuanYiZenHei" in name for name in names), names


def test_an_issued_invoice_keeps_the_details_of_its_day(chinese_customer):
    issued = invoice_issue(invoice=draft_for(chinese_customer), now=ISSUE_DAY)
    assert issued.bill_to.splitlines() == [
        "张伟",
        COMPANY,
        "北京市海淀区中关村大街1号",
        "邮编 100080",
        "alice@example.com",
    ]
    moved = billing_details_update(
        user=chinese_customer, full_name="张伟", company="上海新公司", billing_address=""
    )
    issued.refresh_from_db()
    text = read_back(documents.invoice_pdf(issued, list(issued.lines.all()), issuer="x"))
    assert COMPANY in text and "上海新公司" not in text
    # A draft reads the profile as it is now.
    draft = Invoice.objects.get(pk=draft_for(moved, month=11).pk)
    text = read_back(documents.invoice_pdf(draft, list(draft.lines.all()), issuer="x"))
    assert "上海新公司" in text and COMPANY not in text


def test_a_long_address_pushes_the_table_down_without_losing_a_line(alice):
    alice = billing_details_update(
        user=alice,
        full_name="Alice Owner",
        company=COMPANY * 3,  # wraps onto several lines
        billing_address="\n".join(f"第{n}行 地址" for n in range(1, 7)),
    )
    lines = [(f"实例 {n}", "1.0000", "1.00") for n in range(1, 61)]
    invoice = draft_for(alice, lines)
    invoice.total = Decimal("60.00")
    invoice.save()
    pdf = documents.invoice_pdf(invoice, list(invoice.lines.order_by("id")), issuer="x")
    text = read_back(pdf)
    for n in range(1, 61):
        assert f"实例 {n}\n" in text or f"实例 {n} " in text, n
    assert "page 2 of 2" in text and "60.00" in text
    assert "第6行 地址" not in text  # the bill-to block is capped at 8 printed lines
    assert "第5行 地址" in text


@pytest.fixture
def no_font_cache():
    documents.invoice_font.cache_clear()
    yield
    documents.invoice_font.cache_clear()


def test_a_missing_font_names_the_package_to_install(alice, settings, tmp_path, no_font_cache):
    settings.INVOICE_FONT = str(tmp_path / "absent.ttc")
    invoice = draft_for(alice)
    with pytest.raises(ImproperlyConfigured, match=r"apt-get install fonts-wqy-zenhei"):
        documents.invoice_pdf(invoice, list(invoice.lines.all()), issuer="x")


def test_a_file_that_is_not_a_truetype_font_is_refused_clearly(
    alice, settings, tmp_path, no_font_cache
):
    fake = tmp_path / "NotoSansCJK-Regular.ttc"
    fake.write_bytes(b"OTTO" + b"\0" * 64)
    settings.INVOICE_FONT = str(fake)
    invoice = draft_for(alice)
    with pytest.raises(ImproperlyConfigured, match=r"cannot be embedded.*fonts-wqy-zenhei"):
        documents.invoice_pdf(invoice, list(invoice.lines.all()), issuer="x")


# --- the console ------------------------------------------------------------------


def test_customers_set_their_billing_details_on_the_credit_page(client, alice, bob):
    client.force_login(alice)
    page = client.get(reverse("billing_credit"))
    assert page.status_code == 200 and b'id="details-form"' in page.content
    response = client.post(
        reverse("billing_credit_details"),
        {
            "full_name": "张伟",
            "company": COMPANY,
            "billing_address": "北京市海淀区中关村大街1号\r\n\r\n邮编 100080\r\n",
        },
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.company == COMPANY
    assert alice.billing_address == "北京市海淀区中关村大街1号\n邮编 100080"
    event = AuditEvent.objects.get(action="user.billing_details")
    assert event.actor == alice and event.changes["company"] == COMPANY
    bob.refresh_from_db()
    assert bob.company == ""
    page = client.get(reverse("billing_credit"))
    assert COMPANY in page.content.decode()


def test_bad_billing_details_are_refused_on_the_field(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("billing_credit_details"),
        {"full_name": "", "company": "x" * 151, "billing_address": "\n".join("abcdefg")},
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "company: Ensure this value has at most 150 characters" in body
    assert "billing_address: at most 6 lines" in body
    alice.refresh_from_db()
    assert alice.company == "" and not AuditEvent.objects.filter(action="user.billing_details")


def test_a_hostile_company_name_is_text_on_the_page_and_the_pdf(client, alice):
    hostile = "<script>alert(1)</script> (x) \\"
    alice = billing_details_update(user=alice, full_name="A", company=hostile, billing_address="")
    client.force_login(alice)
    body = client.get(reverse("billing_credit")).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    invoice = draft_for(alice)
    pdf = documents.invoice_pdf(invoice, list(invoice.lines.all()), issuer="x")
    assert hostile in read_back(pdf)
