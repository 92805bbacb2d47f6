"""Monthly invoices: lines from the charges, gap-free numbers, immutable once issued,
credit notes, and PDF/CSV documents that add up."""

import csv
import io
import threading
from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from pypdf import PdfReader

from gpurental.accounts.models import AuditEvent
from gpurental.billing import documents
from gpurental.billing.exceptions import BillingError
from gpurental.billing.models import Invoice, InvoiceLine, InvoiceStatus, LedgerEntry, Voucher
from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.billing.services.invoicing import (
    invoice_credit_note,
    invoice_generate,
    invoice_issue,
    invoice_mark_paid,
    invoice_void,
)
from gpurental.billing.services.metering import meter_run
from gpurental.billing.services.vouchers import (
    voucher_credit_expire,
    voucher_credit_of,
    voucher_redeem,
)
from tests.billing.conftest import beat
from tests.factories import UserFactory

BERLIN = ZoneInfo("Europe/Berlin")
ISSUE_DAY = datetime(2026, 11, 2, 9, tzinfo=UTC)


def local(*args):
    return datetime(*args, tzinfo=BERLIN)


@pytest.fixture
def october(berlin, funded, plan, make_host, run_instance, stop_instance):
    """Alice's October draft. "train" ran Mon 5 Oct 10:00–14:00 (4 h peak = 16.00); "night"
    ran Tue 6 Oct 06:00–09:00 (2 h off-peak = 6.00, 1 h peak = 4.00). Total 26.00."""
    return _october(funded, plan, make_host, run_instance, stop_instance)


def _october(funded, plan, make_host, run_instance, stop_instance):
    host = make_host("node1", plan.gpu_model)
    train = run_instance(funded, plan, host, local(2026, 10, 5, 10), name="train")
    stop_instance(train, local(2026, 10, 5, 14))
    night = run_instance(funded, plan, host, local(2026, 10, 6, 6), name="night")
    stop_instance(night, local(2026, 10, 6, 9))
    meter_run(now=local(2026, 11, 1, 3))
    return invoice_generate(user=funded, year=2026, month=10)


def line_table(invoice):
    return [
        (line.description, line.rate_kind, line.gpu_hours, line.amount)
        for line in invoice.lines.order_by("description", "rate_kind")
    ]


def test_a_draft_has_one_line_per_instance_and_rate_kind(october):
    assert october.status == InvoiceStatus.DRAFT and october.number is None
    assert (october.period_start.isoformat(), october.period_end.isoformat()) == (
        "2026-10-01",
        "2026-11-01",
    )
    assert line_table(october) == [
        ("night (2× H100), off-peak", "off_peak", Decimal("4.0000"), Decimal("6.00")),
        ("night (2× H100), peak", "peak", Decimal("2.0000"), Decimal("4.00")),
        ("train (2× H100), peak", "peak", Decimal("8.0000"), Decimal("16.00")),
    ]
    assert october.total == Decimal("26.00")


def test_lines_are_written_in_the_customers_language(
    berlin, funded, plan, make_host, run_instance, stop_instance
):
    """A customer who chose 中文 gets line descriptions in Chinese on their invoice (and so
    on its PDF); the amounts and rate kinds are the same as in English."""
    funded.language = "zh-hans"
    funded.save(update_fields=["language"])
    host = make_host("node1", plan.gpu_model)
    night = run_instance(funded, plan, host, local(2026, 10, 6, 6), name="night")
    stop_instance(night, local(2026, 10, 6, 9))
    meter_run(now=local(2026, 11, 1, 3))
    invoice = invoice_generate(user=funded, year=2026, month=10)
    assert line_table(invoice) == [
        ("night（2× H100），闲时", "off_peak", Decimal("4.0000"), Decimal("6.00")),
        ("night（2× H100），高峰", "peak", Decimal("2.0000"), Decimal("4.00")),
    ]


def test_generating_a_draft_again_rebuilds_it_in_place(october, funded):
    again = invoice_generate(user=funded, year=2026, month=10)
    assert again.pk == october.pk and line_table(again) == line_table(october)
    assert Invoice.objects.count() == 1


def test_issued_invoices_get_gap_free_numbers_per_series_and_year(october, funded, plan):
    bob = UserFactory()
    other = Invoice.objects.create(
        user=bob, period_start=october.period_start, period_end=october.period_end
    )
    with pytest.raises(RuntimeError), transaction.atomic():
        invoice_issue(invoice=other, now=ISSUE_DAY)
        raise RuntimeError("the issuing transaction fails after taking a number")
    first = invoice_issue(invoice=october, now=ISSUE_DAY)
    second = invoice_issue(invoice=other, now=ISSUE_DAY)
    assert (first.number, second.number) == ("INV-2026-000001", "INV-2026-000002")
    note = invoice_credit_note(
        invoice=first, credits=[(first.lines.first(), Decimal("1.00"))], reason="x", now=ISSUE_DAY
    )
    assert note.number == "CN-2026-000001"
    late = Invoice.objects.create(
        user=UserFactory(), period_start=october.period_start, period_end=october.period_end
    )
    # The year is the operator's: 31 Dec 23:30 UTC is already 2027 in Berlin.
    issued = invoice_issue(invoice=late, now=datetime(2026, 12, 31, 23, 30, tzinfo=UTC))
    assert issued.number == "INV-2027-000001"
    assert AuditEvent.objects.filter(action="invoice.issue").count() == 4


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_issuing_from_many_threads_skips_and_repeats_no_number():
    drafts = [
        Invoice.objects.create(
            user=UserFactory(),
            period_start=datetime(2026, 10, 1).date(),
            period_end=datetime(2026, 11, 1).date(),
        )
        for _ in range(12)
    ]
    errors = []

    def issue(batch):
        try:
            for invoice in batch:
                invoice_issue(invoice=invoice, now=ISSUE_DAY)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=issue, args=(drafts[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    numbers = sorted(Invoice.objects.values_list("number", flat=True))
    assert numbers == [f"INV-2026-{n:06d}" for n in range(1, 13)]


def test_services_refuse_to_change_an_issued_invoice(
    october, funded, plan, make_host, run_instance
):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    with pytest.raises(BillingError, match="only drafts can be issued"):
        invoice_issue(invoice=issued)
    # A late charge in October does not reach the issued invoice.
    host = make_host("node2", plan.gpu_model)
    late = run_instance(funded, plan, host, local(2026, 10, 30, 12))
    beat(host, local(2026, 10, 30, 13))
    meter_run(now=local(2026, 10, 30, 13))
    assert late.charges.exists()
    same = invoice_generate(user=funded, year=2026, month=10)
    assert same.pk == issued.pk and same.total == Decimal("26.00")
    assert line_table(same) == line_table(october)


@pytest.mark.backend
@pytest.mark.parametrize(
    "change",
    [
        {"total": Decimal("1.00")},
        {"number": "INV-2026-999999"},
        {"period_start": datetime(2026, 9, 1).date()},
        {"status": InvoiceStatus.DRAFT},
        {"issued_at": ISSUE_DAY.replace(day=3)},
        {"status": InvoiceStatus.PAID},  # paid without a paid_at
    ],
)
def test_the_database_refuses_raw_updates_of_an_issued_invoice(october, change):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    with pytest.raises(IntegrityError, match="not allowed|cannot be changed"), transaction.atomic():
        Invoice.objects.filter(pk=issued.pk).update(**change)
    issued.refresh_from_db()
    assert (issued.total, issued.number, issued.status) == (
        Decimal("26.00"),
        "INV-2026-000001",
        InvoiceStatus.ISSUED,
    )


@pytest.mark.backend
def test_the_database_refuses_raw_changes_to_lines_of_an_issued_invoice(october):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    line = issued.lines.first()
    with (
        pytest.raises(IntegrityError, match="the lines of an invoice that is issued cannot change"),
        transaction.atomic(),
    ):
        InvoiceLine.objects.filter(pk=line.pk).update(amount=Decimal("0.01"))
    with pytest.raises(IntegrityError), transaction.atomic():
        InvoiceLine.objects.filter(pk=line.pk).delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        InvoiceLine.objects.create(
            invoice=issued, rate_kind="peak", description="extra", gpu_hours=1, amount=1
        )
    with (
        pytest.raises(IntegrityError, match="cannot be deleted"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM billing_invoice WHERE id = %s", [issued.pk])
    assert issued.lines.count() == 3


@pytest.mark.backend
def test_a_draft_cannot_be_issued_with_a_total_other_than_its_lines(october):
    with pytest.raises(IntegrityError, match="total equal to its lines"), transaction.atomic():
        Invoice.objects.filter(pk=october.pk).update(
            status=InvoiceStatus.ISSUED, number="INV-X", issued_at=ISSUE_DAY, total=Decimal("1")
        )


@pytest.mark.backend
def test_issued_invoices_may_only_be_paid_or_voided_once(october, carol):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    issued.save()  # saving it unchanged is harmless
    paid = invoice_mark_paid(invoice=issued, actor=carol, now=ISSUE_DAY)
    assert paid.status == InvoiceStatus.PAID and paid.paid_at == ISSUE_DAY
    assert invoice_mark_paid(invoice=paid).paid_at == ISSUE_DAY  # again: nothing changes
    with pytest.raises(BillingError, match="only issued invoices can become void"):
        invoice_void(invoice=paid)
    with pytest.raises(IntegrityError, match="not allowed"), transaction.atomic():
        Invoice.objects.filter(pk=paid.pk).update(status=InvoiceStatus.VOID, voided_at=ISSUE_DAY)
    assert AuditEvent.objects.filter(action="invoice.paid", actor=carol).count() == 1


def test_a_void_invoice_keeps_its_number_and_the_month_can_be_invoiced_anew(october, funded):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    void = invoice_void(invoice=issued, now=ISSUE_DAY)
    assert (void.status, void.number, void.voided_at) == ("void", "INV-2026-000001", ISSUE_DAY)
    fresh = invoice_generate(user=funded, year=2026, month=10)
    assert fresh.pk != void.pk and fresh.total == Decimal("26.00")
    assert invoice_issue(invoice=fresh, now=ISSUE_DAY).number == "INV-2026-000002"


def test_a_credit_note_corrects_an_issued_invoice_and_refunds_the_balance(october, funded, carol):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    train = issued.lines.get(description__startswith="train")
    before = balance_of(user=funded)
    note = invoice_credit_note(
        invoice=issued,
        credits=[(train, Decimal("6.00"))],
        reason="host was slow",
        actor=carol,
        now=ISSUE_DAY,
    )
    assert (note.kind, note.status, note.corrects, note.total) == (
        "credit_note",
        "issued",
        issued,
        Decimal("6.00"),
    )
    assert [(line.rate_kind, line.gpu_hours, line.amount) for line in note.lines.all()] == [
        ("peak", Decimal("3.0000"), Decimal("6.00"))  # 6/16 of 8 GPU-hours
    ]
    assert balance_of(user=funded) == before + Decimal("6.00")
    refund = LedgerEntry.objects.get(kind="refund")
    assert refund.description == "credit note CN-2026-000001 for INV-2026-000001: host was slow"
    issued.refresh_from_db()
    assert issued.total == Decimal("26.00")  # the invoice itself never changes
    with pytest.raises(BillingError, match="more than the 10.00 left"):
        invoice_credit_note(invoice=issued, credits=[(train, Decimal("10.01"))], reason="again")
    with pytest.raises(BillingError, match="in cents"):
        invoice_credit_note(invoice=issued, credits=[(train, Decimal("0.001"))], reason="again")
    with pytest.raises(BillingError, match="only issued or paid"):
        invoice_credit_note(invoice=note, credits=[(note.lines.first(), 1)], reason="x")


def test_a_credit_note_on_voucher_paid_usage_gives_the_voucher_credit_back_with_its_expiry(
    berlin, funded, plan, make_host, run_instance, stop_instance, carol
):
    Voucher.objects.create(
        code="AUTUMN", amount=Decimal("30.00"), credit_days=60, expires_at=local(2026, 10, 2)
    )
    redemption = voucher_redeem(user=funded, code="AUTUMN", now=local(2026, 10, 1)).redemption
    issued = invoice_issue(
        invoice=_october(funded, plan, make_host, run_instance, stop_instance), now=ISSUE_DAY
    )
    assert voucher_credit_of(user=funded, now=ISSUE_DAY) == Decimal("4.00")  # 26.00 spent
    train = issued.lines.get(description__startswith="train")
    invoice_credit_note(
        invoice=issued,
        credits=[(train, Decimal("6.00"))],
        reason="slow",
        actor=carol,
        now=ISSUE_DAY,
    )
    assert voucher_credit_of(user=funded, now=ISSUE_DAY) == Decimal("10.00")
    voucher_credit_expire(now=redemption.credit_expires_at)
    redemption.refresh_from_db()
    assert redemption.expired_amount == Decimal("10.00")  # the refund expired with it


def test_drafts_cannot_be_credited(october):
    with pytest.raises(BillingError, match="only issued or paid"):
        invoice_credit_note(invoice=october, credits=[(october.lines.first(), 1)], reason="x")


def test_the_admin_cannot_change_an_issued_invoice_or_its_lines(client, carol, october):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    client.force_login(carol)
    url = reverse("admin:billing_invoice_change", args=[issued.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert 'name="total"' not in page.text and 'name="lines-0-amount"' not in page.text
    line = issued.lines.first()
    client.post(
        url,
        {
            "total": "0.00",
            "lines-TOTAL_FORMS": "1",
            "lines-INITIAL_FORMS": "1",
            "lines-0-id": str(line.pk),
            "lines-0-invoice": str(issued.pk),
            "lines-0-amount": "0.01",
            "lines-0-DELETE": "on",
        },
    )
    assert client.post(reverse("admin:billing_invoice_delete", args=[issued.pk])).status_code == 403
    issued.refresh_from_db()
    assert issued.total == Decimal("26.00") and issued.lines.count() == 3
    assert InvoiceLine.objects.get(pk=line.pk).amount == line.amount


def test_admin_actions_issue_and_mark_paid(client, carol, october):
    client.force_login(carol)
    url = reverse("admin:billing_invoice_changelist")
    client.post(url, {"action": "issue", "_selected_action": [october.pk]})
    october.refresh_from_db()
    assert october.status == "issued" and october.number == "INV-2026-000001"
    client.post(url, {"action": "mark_paid", "_selected_action": [october.pk]})
    october.refresh_from_db()
    assert october.status == "paid"
    pdf = client.get(reverse("admin:billing_invoice_document", args=[october.pk, "pdf"]))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")


# --- documents ------------------------------------------------------------------


def test_the_pdf_opens_and_its_figures_are_the_invoices(october):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    lines = list(issued.lines.order_by("id"))
    pdf = PdfReader(io.BytesIO(documents.invoice_pdf(issued, lines, issuer="Example GPU Cloud")))
    assert len(pdf.pages) == 1
    text = pdf.pages[0].extract_text()
    assert "Invoice INV-2026-000001" in text and "Example GPU Cloud" in text
    assert "alice@example.com" in text and "Period: 2026-10-01 to 2026-11-01" in text
    for line in lines:
        assert line.description in text and f"{line.amount:,.2f}" in text
    assert sum(line.amount for line in lines) == issued.total
    assert f"Total\n{issued.total:,.2f}" in text or f"Total {issued.total:,.2f}" in text


def test_a_long_invoice_runs_over_several_pages(funded):
    invoice = Invoice.objects.create(
        user=funded,
        period_start=datetime(2026, 10, 1).date(),
        period_end=datetime(2026, 11, 1).date(),
    )
    InvoiceLine.objects.bulk_create(
        InvoiceLine(
            invoice=invoice,
            rate_kind="peak",
            description=f"instance {n} (weird (name) \\ ü–€)",
            gpu_hours=Decimal(n),
            amount=Decimal(n) + Decimal("0.25"),
        )
        for n in range(1, 101)
    )
    invoice.total = sum(Decimal(n) + Decimal("0.25") for n in range(1, 101))
    invoice.save()
    lines = list(invoice.lines.order_by("id"))
    pdf = PdfReader(io.BytesIO(documents.invoice_pdf(invoice, lines, issuer="x")))
    assert len(pdf.pages) == 3
    text = "\n".join(page.extract_text() for page in pdf.pages)
    assert "instance 100 (weird (name) \\ ü–€)" in text
    assert "5,075.00" in text  # 5050 + 100 × 0.25
    assert "page 3 of 3" in text


def test_the_csv_lines_add_up_to_its_total(october):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    rows = list(
        csv.DictReader(io.StringIO(documents.invoice_csv(issued, list(issued.lines.all()))))
    )
    *lines, total = rows
    assert len(lines) == 3 and total["description"] == "Total"
    assert sum(Decimal(r["amount"]) for r in lines) == Decimal(total["amount"]) == issued.total
    assert sum(Decimal(r["gpu_hours"]) for r in lines) == Decimal(total["gpu_hours"]) == 14
    assert {r["invoice"] for r in rows} == {"INV-2026-000001"}


def test_csv_cells_cannot_become_spreadsheet_formulas():
    assert documents.csv_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert documents.csv_cell("-12.50") == "-12.50"


# --- the customer's pages ---------------------------------------------------------


def test_owners_download_their_issued_invoices_and_nobody_else(client, october, funded):
    issued = invoice_issue(invoice=october, now=ISSUE_DAY)
    pdf_url = reverse("billing_invoice_document", args=[issued.pk, "pdf"])
    csv_url = reverse("billing_invoice_document", args=[issued.pk, "csv"])
    assert client.get(pdf_url).status_code == 302  # log in first
    client.force_login(funded)
    response = client.get(pdf_url)
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert 'filename="INV-2026-000001.pdf"' in response["Content-Disposition"]
    assert PdfReader(io.BytesIO(response.content)).pages
    assert client.get(csv_url).status_code == 200
    listing = client.get(reverse("billing_invoices"))
    assert "INV-2026-000001" in listing.text and "26.00" in listing.text
    client.force_login(UserFactory())
    assert client.get(pdf_url).status_code == 404
    assert client.get(csv_url).status_code == 404
    assert "INV-2026-000001" not in client.get(reverse("billing_invoices")).text


def test_drafts_are_not_shown_to_customers(client, october, funded):
    client.force_login(funded)
    url = reverse("billing_invoice_document", args=[october.pk, "pdf"])
    assert client.get(url).status_code == 404


def test_usage_report_per_instance_per_day(client, october, funded):
    client.force_login(funded)
    response = client.get(reverse("billing_usage_csv") + "?month=2026-10")
    assert response.status_code == 200
    rows = [
        (r["day"], r["instance_name"], r["gpu_hours"], r["cost"])
        for r in csv.DictReader(io.StringIO(response.content.decode()))
    ]
    assert rows == [
        ("2026-10-05", "train", "8.0000", "16.00"),
        ("2026-10-06", "night", "6.0000", "10.00"),
    ]
    bad = client.get(reverse("billing_usage_csv") + "?month=October")
    assert bad.status_code == 400 and "month: use YYYY-MM" in bad.text
    client.force_login(UserFactory())
    other = client.get(reverse("billing_usage_csv") + "?month=2026-10")
    assert other.content.decode().count("\n") == 1  # the header only


def test_the_invoices_page_warns_of_a_low_balance(client, alice):
    credit_add(user=alice, amount=Decimal("1.00"))
    LedgerEntry.objects.create(user=alice, kind="adjustment", amount=Decimal("-2.00"))
    client.force_login(alice)
    assert 'id="low-balance"' in client.get(reverse("billing_invoices")).text


def test_the_billing_page_shows_the_usage_report_per_instance_per_day(client, october, funded):
    client.force_login(funded)
    page = client.get(reverse("billing_invoices") + "?month=2026-10")
    assert page.status_code == 200
    report = page.text[page.text.index('id="usage"') :]
    for text in ("2026-10-05", "train", "8.00", "16.00", "2026-10-06", "night", "10.00"):
        assert text in report
    assert 'id="forecast"' in page.text
    client.force_login(UserFactory())
    assert (
        "No metered use in 2026-10"
        in client.get(reverse("billing_invoices") + "?month=2026-10").text
    )
    assert client.get(reverse("billing_invoices") + "?month=nonsense").status_code == 200
