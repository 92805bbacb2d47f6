"""Vouchers: staff-made codes whose credit is spent before paid credit and expires by
itself; one redemption per account, uses counted atomically, refusals naming the rule."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection
from rest_framework.test import APIClient

from gpurental.accounts.models import AuditEvent
from gpurental.accounts.services import api_key_create
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import (
    LedgerEntry,
    Payment,
    PaymentStatus,
    Voucher,
    VoucherRedemption,
)
from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.billing.services.vouchers import (
    VoucherRefused,
    voucher_applied_between,
    voucher_credit_expire,
    voucher_credit_of,
    voucher_redeem,
)
from gpurental.rentals.services import lifecycle as lc
from tests.factories import UserFactory

T0 = datetime(2026, 6, 10, 10, tzinfo=UTC)


def make_voucher(code="POC-WEEK", amount="10.00", **kwargs) -> Voucher:
    kwargs.setdefault("expires_at", T0 + timedelta(days=30))
    return Voucher.objects.create(code=code, amount=Decimal(amount), **kwargs)


def spend(user, amount: str, at: datetime) -> LedgerEntry:
    return LedgerEntry.objects.create(
        user=user, kind=LedgerEntry.Kind.USAGE, amount=-Decimal(amount), created_at=at
    )


def test_redeeming_adds_voucher_credit_once_per_account(alice):
    make_voucher()
    first = voucher_redeem(user=alice, code=" poc-week ", now=T0)
    assert first.created and first.redemption.amount == Decimal("10.00")
    assert first.redemption.credit_expires_at == T0 + timedelta(days=7)
    again = voucher_redeem(user=alice, code="POC-WEEK", now=T0 + timedelta(hours=1))
    assert not again.created and again.redemption.pk == first.redemption.pk
    assert balance_of(user=alice) == Decimal("10.00")
    assert Voucher.objects.get().uses == 1
    entry = first.redemption.ledger_entry
    assert entry.kind == LedgerEntry.Kind.VOUCHER and entry.description == "Voucher POC-WEEK"
    assert AuditEvent.objects.filter(action="voucher.redeem").count() == 1


@pytest.mark.backend
def test_the_database_allows_one_redemption_per_account_and_voucher(alice):
    voucher_redeem(user=alice, code=make_voucher().code, now=T0)
    redemption = VoucherRedemption.objects.get()
    entry = LedgerEntry.objects.create(user=alice, kind="voucher", amount=Decimal(1))
    with pytest.raises(IntegrityError):
        VoucherRedemption.objects.create(
            voucher=redemption.voucher,
            user=alice,
            amount=Decimal(1),
            credit_expires_at=T0,
            ledger_entry=entry,
        )


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("unknown", "no voucher has the code NOPE; check it for typos"),
        ("expired", "voucher OLD expired on 2026-06-01 00:00 UTC; it can no longer be redeemed"),
        ("used_up", "voucher ONCE has been used up (all 1 uses are taken)"),
        ("paid", "voucher FIRST is for accounts that have not paid yet, and this account has"),
    ],
)
def test_a_wrong_expired_used_up_or_first_top_up_code_is_refused_naming_the_rule(
    alice, setup, message
):
    code = "NOPE"
    if setup == "expired":
        code = make_voucher("OLD", expires_at=datetime(2026, 6, 1, tzinfo=UTC)).code
    elif setup == "used_up":
        code = make_voucher("ONCE", max_uses=1).code
        voucher_redeem(user=UserFactory(), code=code, now=T0)
    elif setup == "paid":
        code = make_voucher("FIRST", first_topup_only=True).code
        entry = credit_add(user=alice, amount=Decimal(5))
        Payment.objects.create(
            user=alice,
            provider="stripe",
            amount=Decimal(5),
            currency="USD",
            status=PaymentStatus.PAID,
            paid_at=T0,
            ledger_entry=entry,
        )
    with pytest.raises(VoucherRefused) as refused:
        voucher_redeem(user=alice, code=code, now=T0)
    assert refused.value.field == "code"
    assert refused.value.message.startswith(message)
    assert not VoucherRedemption.objects.filter(user=alice).exists()


def test_a_first_top_up_voucher_is_fine_for_an_account_that_never_paid(alice):
    make_voucher("WELCOME", first_topup_only=True)
    assert voucher_redeem(user=alice, code="welcome", now=T0).created


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_two_accounts_racing_for_the_last_use_get_it_once():
    voucher = make_voucher("LAST", max_uses=1)
    users = [UserFactory(), UserFactory(), UserFactory(), UserFactory()]
    barrier = threading.Barrier(len(users))
    outcomes: list[str] = []

    def redeem(user):
        try:
            barrier.wait()
            voucher_redeem(user=user, code="LAST", now=T0)
            outcomes.append("ok")
        except VoucherRefused:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=redeem, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "refused", "refused", "refused"]
    voucher.refresh_from_db()
    assert voucher.uses == 1 and VoucherRedemption.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="voucher").count() == 1


def test_voucher_credit_is_spent_before_paid_credit_and_the_rest_expires(alice):
    credit_add(user=alice, amount=Decimal("20.00"))  # paid credit
    make_voucher(amount="10.00", credit_days=7)
    voucher_redeem(user=alice, code="POC-WEEK", now=T0)
    spend(alice, "4.00", T0 + timedelta(days=1))
    assert voucher_credit_of(user=alice, now=T0 + timedelta(days=2)) == Decimal("6.00")
    assert balance_of(user=alice) == Decimal("26.00")

    # Nothing expires early; at the end, what is left of the voucher goes, paid credit stays.
    assert voucher_credit_expire(now=T0 + timedelta(days=6)) == 0
    assert voucher_credit_expire(now=T0 + timedelta(days=7)) == 1
    assert balance_of(user=alice) == Decimal("20.00")
    redemption = VoucherRedemption.objects.get()
    assert redemption.expired_amount == Decimal("6.00")
    assert redemption.expiry_entry.amount == Decimal("-6.00")
    assert voucher_credit_expire(now=T0 + timedelta(days=8)) == 0  # once
    assert balance_of(user=alice) == Decimal("20.00")
    # Spending after the expiry comes from paid credit only.
    spend(alice, "3.00", T0 + timedelta(days=9))
    assert voucher_credit_of(user=alice, now=T0 + timedelta(days=10)) == 0


def test_a_fully_spent_voucher_takes_nothing_back(alice):
    make_voucher(amount="5.00")
    voucher_redeem(user=alice, code="POC-WEEK", now=T0)
    credit_add(user=alice, amount=Decimal("10.00"))
    spend(alice, "8.00", T0 + timedelta(hours=5))
    voucher_credit_expire(now=T0 + timedelta(days=8))
    assert balance_of(user=alice) == Decimal("7.00")
    assert VoucherRedemption.objects.get().expired_amount == 0


def test_invoices_can_show_the_voucher_credit_applied_in_their_period(alice):
    make_voucher(amount="5.00")
    voucher_redeem(user=alice, code="POC-WEEK", now=T0)
    credit_add(user=alice, amount=Decimal("10.00"))
    spend(alice, "3.00", T0 + timedelta(hours=1))
    spend(alice, "4.00", T0 + timedelta(hours=2))  # 2.00 from the voucher, 2.00 paid
    june = (datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC))
    assert voucher_applied_between(user=alice, start=june[0], end=june[1]) == Decimal("5.00")
    july = (datetime(2026, 7, 1, tzinfo=UTC), datetime(2026, 8, 1, tzinfo=UTC))
    assert voucher_applied_between(user=alice, start=july[0], end=july[1]) == 0


def test_a_launch_on_expired_voucher_credit_is_refused(alice, plan, image, make_host, sent):
    make_host("node1", plan.gpu_model)
    past = datetime.now(tz=UTC) - timedelta(days=10)
    make_voucher(amount="10.00", credit_days=7, expires_at=past + timedelta(days=30))
    voucher_redeem(user=alice, code="POC-WEEK", now=past)
    with pytest.raises(InsufficientBalance) as refused:
        lc.instance_launch(user=alice, image=image, plan=plan)
    assert "your balance is 0.00 USD" in refused.value.message
    # The refusal rolls its transaction back; beat's sweep takes the credit back for good.
    assert voucher_credit_expire() == 1
    assert balance_of(user=alice) == 0


def test_a_launch_on_fresh_voucher_credit_goes(alice, plan, image, make_host, sent):
    make_host("node1", plan.gpu_model)
    make_voucher(amount="10.00", expires_at=datetime.now(tz=UTC) + timedelta(days=1))
    voucher_redeem(user=alice, code="POC-WEEK")
    assert lc.instance_launch(user=alice, image=image, plan=plan).pk


def api(user) -> APIClient:
    _, raw = api_key_create(user=user, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_api_redeem_then_again_then_a_wrong_code(alice):
    make_voucher(amount="10.00", expires_at=datetime.now(tz=UTC) + timedelta(days=1))
    as_alice = api(alice)
    first = as_alice.post("/api/v1/vouchers/redeem/", {"code": "poc-week"}, format="json")
    assert first.status_code == 201, first.content
    body = first.json()
    assert body["created"] is True and body["amount"] == "10.00"
    assert body["balance"] == "10.00" and body["voucher_credit"] == "10.00"
    again = as_alice.post("/api/v1/vouchers/redeem/", {"code": "POC-WEEK"}, format="json")
    assert again.status_code == 200 and again.json()["created"] is False
    wrong = as_alice.post("/api/v1/vouchers/redeem/", {"code": "NOPE"}, format="json")
    assert wrong.status_code == 400
    error = wrong.json()["error"]
    assert error["fields"]["code"] == ["no voucher has the code NOPE; check it for typos"]
    assert error["message"].startswith("code: no voucher")


def test_console_redeem_shows_the_credit_and_errors_name_the_field(client, alice, bob):
    make_voucher(amount="10.00", expires_at=datetime.now(tz=UTC) + timedelta(days=1))
    client.force_login(alice)
    wrong = client.post("/credit/redeem/", {"code": "NOPE"})
    assert wrong.status_code == 400 and b"code: no voucher has the code NOPE" in wrong.content
    done = client.post("/credit/redeem/", {"code": "poc-week"}, follow=True)
    assert b"Voucher POC-WEEK redeemed: 10.00 USD" in done.content
    assert b"of which voucher credit $10.00" in done.content
    client.force_login(bob)
    assert b"POC-WEEK" not in client.get("/credit/").content


def test_beat_runs_the_expiry_sweep(alice):
    from gpurental.billing.tasks import expire_voucher_credit
    from gpurental.celery_app import app

    entry = app.conf.beat_schedule["billing-expire-voucher-credit"]
    assert entry["task"] == expire_voucher_credit.name
    past = datetime.now(tz=UTC) - timedelta(days=10)
    make_voucher(amount="10.00", credit_days=7, expires_at=past + timedelta(days=30))
    voucher_redeem(user=alice, code="POC-WEEK", now=past)
    assert expire_voucher_credit.apply().get() == 1
    assert balance_of(user=alice) == 0


def test_the_invoice_documents_show_the_voucher_credit_applied_apart(alice):
    from datetime import date
    from io import BytesIO

    from pypdf import PdfReader

    from gpurental.billing.models import Invoice
    from gpurental.billing.views import invoice_document_response

    make_voucher(amount="5.00")
    voucher_redeem(user=alice, code="POC-WEEK", now=T0)
    credit_add(user=alice, amount=Decimal("10.00"))
    spend(alice, "7.00", T0 + timedelta(hours=1))
    invoice = Invoice.objects.create(
        user=alice, period_start=date(2026, 6, 1), period_end=date(2026, 7, 1), total=Decimal(7)
    )
    rows = invoice_document_response(invoice, "csv").content.decode().splitlines()
    assert rows[-2].split(",")[4] == "Total"
    assert rows[-1].split(",")[4:] == ["Voucher credit applied", "", "", "", "", "5.00", "USD"]
    pdf = PdfReader(BytesIO(invoice_document_response(invoice, "pdf").content))
    text = pdf.pages[0].extract_text()
    assert "Voucher credit applied" in text and "5.00" in text
