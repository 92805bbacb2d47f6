"""Usage and invoices over the API: your own only, PDF and CSV downloads."""

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpurental.billing.models import InvoiceStatus
from gpurental.billing.services.invoicing import invoice_generate, invoice_issue
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.services import lifecycle as lc
from tests.api.conftest import assert_error
from tests.billing.conftest import beat

USAGE = "/api/v1/usage/"
INVOICES = "/api/v1/invoices/"
MONDAY = datetime(2026, 10, 5, 10, tzinfo=UTC)


@pytest.fixture(autouse=True)
def utc(settings):
    settings.TIME_ZONE = "UTC"
    settings.BILLING_CURRENCY = "USD"


@pytest.fixture
def ran(image, node, sent):
    """``user`` ran 1× A100 (2.20/h, peak from 08:00) for ``hours`` from ``at``."""

    def run(user, plan, at, hours, name):
        beat(node, at)
        instance = lc.instance_launch(user=user, image=image, plan=plan, name=name, now=at)
        lc.instance_report_running(
            instance_id=str(instance.pk), port=4000, container_id="c", now=at
        )
        end = at + timedelta(hours=hours)
        beat(node, end)
        lc.instance_stop(instance=instance, now=end)
        lc.instance_report_stopped(instance_id=str(instance.pk), now=end)
        return instance

    return run


@pytest.fixture
def october(alice, bob, a100, ran):
    """Alice ran "train" 2 h on Monday 5 October (4.40); bob ran "bobs" 1 h (2.20)."""
    plan = a100.plans.get(gpu_count=1)
    train = ran(alice, plan, MONDAY, 2, "train")
    ran(bob, plan, MONDAY + timedelta(hours=3), 1, "bobs")
    meter_run(now=datetime(2026, 11, 1, 3, tzinfo=UTC))
    return train


@pytest.fixture
def issued(october, alice, bob):
    """Alice's and bob's October invoices, issued."""
    return [
        invoice_issue(invoice=invoice_generate(user=user, year=2026, month=10))
        for user in (alice, bob)
    ]


# --- usage ------------------------------------------------------------------------


def test_usage_of_a_month_is_per_day_and_instance_and_own_only(as_alice, as_bob, october):
    data = as_alice.get(USAGE, {"month": "2026-10"}).json()

    assert data["month"] == "2026-10" and data["currency"] == "USD"
    assert data["start"] == "2026-10-01T00:00:00Z" and data["end"] == "2026-11-01T00:00:00Z"
    assert data["rows"] == [
        {
            "day": "2026-10-05",
            "instance_id": str(october.pk),
            "instance_name": "train",
            "plan": "1× A100",
            "gpu_hours": "2.0000",
            "cost": "4.40",
        }
    ]
    assert data["totals"] == {"gpu_hours": "2.0000", "cost": "4.40"}
    assert [r["instance_name"] for r in as_bob.get(USAGE, {"month": "2026-10"}).json()["rows"]] == [
        "bobs"
    ]


def test_usage_defaults_to_this_month(as_alice, october):
    data = as_alice.get(USAGE).json()
    assert data["month"] == datetime.now(UTC).strftime("%Y-%m")
    assert data["rows"] == [] and data["totals"] == {"gpu_hours": "0.0000", "cost": "0.00"}


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "October", "0000-01", "9999-12"])
def test_a_bad_month_is_refused_naming_it(as_alice, month):
    assert_error(as_alice.get(USAGE, {"month": month}), 400, "invalid", field="month")
    assert_error(as_alice.get(f"{USAGE}csv/", {"month": month}), 400, "invalid", field="month")


def test_usage_csv_is_the_consoles_report(as_alice, october):
    response = as_alice.get(f"{USAGE}csv/", {"month": "2026-10"}, HTTP_ACCEPT="text/csv")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert 'filename="usage-2026-10.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:6] == ["day", "instance", "instance_name", "plan", "gpu_hours", "cost"]
    assert rows[1:] == [
        ["2026-10-05", str(october.pk), "train", "1× A100", "2.0000", "4.40", "USD"]
    ]


# --- invoices ---------------------------------------------------------------------


def test_drafts_are_not_listed(as_alice, october, alice):
    invoice_generate(user=alice, year=2026, month=10)
    assert as_alice.get(INVOICES).json()["results"] == []


def test_invoices_are_own_only_with_their_lines(as_alice, issued, october):
    mine, _ = issued
    listed = as_alice.get(INVOICES).json()["results"]

    assert [i["id"] for i in listed] == [mine.pk]
    invoice = listed[0]
    assert invoice["number"] == mine.number and invoice["status"] == InvoiceStatus.ISSUED
    assert invoice["kind"] == "invoice" and invoice["currency"] == "USD"
    assert invoice["period_start"] == "2026-10-01" and invoice["period_end"] == "2026-11-01"
    assert invoice["total"] == "4.40" and invoice["corrects"] is None
    [line] = invoice["lines"]
    assert line["instance"] == str(october.pk) and line["reservation"] is None
    assert line["rate_kind"] == "peak" and line["gpu_hours"] == "2.0000"
    assert line["amount"] == "4.40"
    assert as_alice.get(f"{INVOICES}{mine.pk}/").json() == invoice


def test_invoice_pdf_and_csv_downloads(as_alice, issued):
    mine, _ = issued
    pdf = as_alice.get(f"{INVOICES}{mine.pk}/pdf/", HTTP_ACCEPT="application/pdf")
    assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF")
    assert f'filename="{mine.number}.pdf"' in pdf["Content-Disposition"]

    table = as_alice.get(f"{INVOICES}{mine.pk}/csv/")
    assert table.status_code == 200 and table["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(table.content.decode())))
    assert rows[-1][4] == "Total" and rows[-1][-2] == "4.40"


def test_another_customers_invoice_is_not_found(as_alice, as_carol, issued):
    _, bobs = issued
    for suffix, accept in (("", "application/json"), ("pdf/", "application/pdf"), ("csv/", "*/*")):
        url = f"{INVOICES}{bobs.pk}/{suffix}"
        error = assert_error(as_alice.get(url, HTTP_ACCEPT=accept), 404, "not_found")
        assert error["message"] == f"there is no invoice {bobs.pk}"
        # Staff too: invoices are the customer's, the back-office has its own pages.
        assert_error(as_carol.get(url), 404, "not_found")
    assert_error(as_alice.get(f"{INVOICES}{'9' * 30}/"), 404, "not_found")


def test_me_warns_of_a_low_balance(as_alice):
    data = as_alice.get("/api/v1/me/").json()
    assert data["low_balance"] is True and data["hours_left"] is None
    assert data["hourly_burn"] == "0.0000"


def test_an_issued_invoice_cannot_be_changed_through_the_api(as_alice, issued):
    mine, _ = issued
    url = f"{INVOICES}{mine.pk}/"
    for method in ("put", "patch", "delete"):
        response = getattr(as_alice, method)(url, {"total": "0.00", "status": "void"})
        assert response.status_code == 405, method
    assert as_alice.post(INVOICES, {"total": "0.00"}).status_code == 405
    mine.refresh_from_db()
    assert mine.total == Decimal("4.40") and mine.status == InvoiceStatus.ISSUED
