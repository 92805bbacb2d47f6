"""Automatic top-up through Stripe: a card saved at Stripe's page (known here only from the
signed ``setup_intent.succeeded``), an off-session PaymentIntent when the balance falls
below the threshold, credit only from the signed ``payment_intent.succeeded``, and a
monthly cap the database holds. The ``stripe`` library talks HTTP to a local server that
answers like Stripe; events are signed with the library's own signing code."""

from __future__ import annotations

import json
import secrets
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import stripe
from django.db import IntegrityError, connection
from django.utils import timezone
from rest_framework.test import APIClient

from gpurental.accounts.models import AuditEvent
from gpurental.accounts.services import api_key_create
from gpurental.billing.models import (
    AutoTopUp,
    AutoTopUpEvent,
    AutoTopUpMonth,
    LedgerEntry,
    Payment,
    PaymentStatus,
)
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.autotopup import (
    AutoTopUpRefused,
    auto_topup_check,
    auto_topup_configure,
    auto_topup_run,
)
from gpurental.billing.services.credits import credit_add
from gpurental.billing.tasks import enforce_limits
from tests.billing.stripe_server import StripeLikeServer
from tests.billing.test_payments import SECRET, post_signed

NOV = datetime(2026, 11, 10, 12, tzinfo=UTC)
DEC = datetime(2026, 12, 2, 12, tzinfo=UTC)
Kind = AutoTopUpEvent.Kind


@pytest.fixture
def stripe_api(settings):
    with StripeLikeServer() as server:
        settings.PAYMENT_PROVIDER = "stripe"
        settings.STRIPE_SECRET_KEY = "sk_test_not_a_real_key"
        settings.STRIPE_WEBHOOK_SECRET = SECRET
        settings.STRIPE_API_BASE = server.url
        settings.BILLING_CURRENCY = "USD"
        settings.TIME_ZONE = "UTC"
        yield server


def stripe_event(type: str, obj: dict) -> str:
    return json.dumps(
        {
            "id": "evt_" + secrets.token_hex(12),
            "object": "event",
            "api_version": "2025-01-27.acacia",
            "created": int(time.time()),
            "type": type,
            "data": {"object": obj},
        }
    )


def setup_succeeded(user, customer: str, method: str = "pm_card_visa") -> str:
    return stripe_event(
        "setup_intent.succeeded",
        {
            "id": "seti_" + secrets.token_hex(8),
            "object": "setup_intent",
            "status": "succeeded",
            "usage": "off_session",
            "customer": customer,
            "payment_method": method,
            "metadata": {"user_id": str(user.pk), "purpose": "auto_topup"},
        },
    )


def intent_event(payment: Payment, type="payment_intent.succeeded", **fields) -> str:
    cents = int(payment.amount * 100)
    obj = {
        "id": payment.provider_ref,
        "object": "payment_intent",
        "amount": cents,
        "amount_received": cents if type == "payment_intent.succeeded" else 0,
        "currency": payment.currency.lower(),
        "status": "succeeded" if type == "payment_intent.succeeded" else "requires_payment_method",
        "metadata": {"payment_id": str(payment.id), "purpose": "auto_topup"},
    }
    if type == "payment_intent.payment_failed":
        obj["last_payment_error"] = {"code": "card_declined", "message": "declined"}
    obj.update(fields)
    return stripe_event(type, obj)


def save_card(client, user, stripe_api) -> AutoTopUp:
    """Through the console: Save a card → Stripe's setup page; then Stripe's signed event."""
    client.force_login(user)
    response = client.post("/credit/auto-top-up/card/")
    assert response.status_code == 302
    session = stripe_api.sessions[-1]
    assert response["Location"].startswith("https://checkout.stripe.test/c/pay/cs_test_")
    assert session["form"]["mode"] == "setup"
    assert session["form"]["setup_intent_data[metadata][purpose]"] == "auto_topup"
    customer = session["form"]["customer"]
    assert customer.startswith("cus_")
    answer = post_signed(client, setup_succeeded(user, customer))
    assert answer.status_code == 200 and answer.json()["outcome"] == "card_saved", answer.content
    return AutoTopUp.objects.get(user=user)


def turn_on(user, *, threshold="10.00", amount="50.00", cap="120.00", now=NOV) -> AutoTopUp:
    return auto_topup_configure(
        user=user, enabled=True, threshold=threshold, amount=amount, monthly_cap=cap, now=now
    )


def spend(user, amount: str) -> None:
    LedgerEntry.objects.create(
        user=user, kind=LedgerEntry.Kind.ADJUSTMENT, amount=-Decimal(amount), description="spent"
    )


def test_below_the_threshold_the_saved_card_is_charged_and_the_webhook_credits(
    client, stripe_api, alice
):
    row = save_card(client, alice, stripe_api)
    assert row.payment_method_ref == "pm_card_visa" and row.card_label == "visa ending 4242"
    assert not row.enabled  # saving a card turns nothing on
    turn_on(alice, now=timezone.now())

    credit_add(user=alice, amount=Decimal("30.00"), description="start")
    assert auto_topup_run() == 0  # 30 is above the threshold of 10
    spend(alice, "25.00")  # 5.00 left

    assert auto_topup_run() == 1
    [sent] = stripe_api.intents
    payment = Payment.objects.get(user=alice, kind=Payment.Kind.AUTO)
    form = sent["form"]
    assert form["off_session"] == "true" and form["confirm"] == "true"
    assert form["amount"] == "5000" and form["currency"] == "usd"
    assert form["customer"] == row.customer_ref and form["payment_method"] == "pm_card_visa"
    assert form["metadata[payment_id]"] == str(payment.id)
    assert sent["idempotency_key"] == f"auto-topup-{payment.id}"
    assert payment.status == PaymentStatus.PENDING and payment.provider_ref.startswith("pi_")
    # Stripe answered "succeeded", but only the signed webhook credits.
    assert balance_of(user=alice) == Decimal("5.00")
    assert auto_topup_run() == 0  # one in flight at a time
    assert len(stripe_api.intents) == 1

    response = post_signed(client, intent_event(payment))
    assert response.status_code == 200 and response.json()["outcome"] == "credited"
    assert balance_of(user=alice) == Decimal("55.00")
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.PAID
    again = post_signed(client, intent_event(payment))  # a new event id, the same payment
    assert again.json()["outcome"] == "already_paid"
    assert balance_of(user=alice) == Decimal("55.00")
    kinds = list(AutoTopUpEvent.objects.filter(user=alice).order_by("id").values_list("kind"))
    assert [k for (k,) in kinds] == [
        Kind.CARD_SAVED,
        Kind.SETTINGS,
        Kind.CHARGE_STARTED,
        Kind.CREDITED,
    ]
    page = client.get("/credit/").content.decode()
    assert "visa ending 4242" in page and "$50.00 of $120.00 taken" in page


@pytest.mark.backend
def test_the_monthly_cap_is_never_passed_and_a_new_month_starts_again(client, stripe_api, alice):
    save_card(client, alice, stripe_api)
    turn_on(alice, amount="50.00", cap="120.00")
    for _ in range(2):
        assert auto_topup_run(now=NOV) == 1
        payment = Payment.objects.get(user=alice, status=PaymentStatus.PENDING)
        assert post_signed(client, intent_event(payment)).json()["outcome"] == "credited"
        spend(alice, "50.00")
    # 100 taken; 50 more would make 150 > 120.
    assert auto_topup_run(now=NOV) == 0
    assert auto_topup_run(now=NOV) == 0
    month = AutoTopUpMonth.objects.get(user=alice)
    assert month.charged == Decimal("100.00") and month.cap == Decimal("120.00")
    assert AutoTopUpEvent.objects.filter(user=alice, kind=Kind.CAP_REACHED).count() == 1
    assert len(stripe_api.intents) == 2
    # The database itself refuses a month past its cap, whatever the code does.
    with pytest.raises(IntegrityError):
        AutoTopUpMonth.objects.filter(pk=month.pk).update(charged=Decimal("170.00"))


def test_a_new_calendar_month_has_its_own_cap(client, stripe_api, alice):
    save_card(client, alice, stripe_api)
    turn_on(alice, amount="50.00", cap="50.00")
    assert auto_topup_run(now=NOV) == 1
    payment = Payment.objects.get(user=alice, status=PaymentStatus.PENDING)
    post_signed(client, intent_event(payment))
    spend(alice, "50.00")
    assert auto_topup_run(now=NOV) == 0
    assert auto_topup_run(now=DEC) == 1
    months = dict(AutoTopUpMonth.objects.values_list("month", "charged"))
    assert {m.month: v for m, v in months.items()} == {11: Decimal("50.00"), 12: Decimal("50.00")}


def test_lowering_the_cap_below_what_was_taken_stops_the_month_without_undoing_it(
    client, stripe_api, alice
):
    save_card(client, alice, stripe_api)
    turn_on(alice, amount="50.00", cap="200.00")
    auto_topup_run(now=NOV)
    post_signed(client, intent_event(Payment.objects.get(user=alice)))
    spend(alice, "50.00")
    turn_on(alice, amount="20.00", cap="20.00")
    month = AutoTopUpMonth.objects.get(user=alice)
    assert month.charged == Decimal("50.00") and month.cap == Decimal("50.00")
    assert auto_topup_run(now=NOV) == 0


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_two_checks_at_once_make_one_payment_and_one_charge(stripe_api, alice):
    row = AutoTopUp.objects.create(
        user=alice, provider="stripe", customer_ref="cus_x", payment_method_ref="pm_card_visa"
    )
    row.card_label = "visa ending 4242"
    row.save()
    turn_on(alice, amount="50.00", cap="500.00")
    barrier, results, errors = threading.Barrier(4), [], []

    def check():
        try:
            barrier.wait()
            results.append(auto_topup_check(user=alice, now=NOV))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=check) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    [payment] = Payment.objects.filter(user=alice)
    # A check that finds the charge asked for and not yet answered asks again for the
    # same payment, with the same idempotency key: one charge at the provider.
    assert {r.pk for r in results if r is not None} == {payment.pk}
    assert {r["idempotency_key"] for r in stripe_api.intents} == {f"auto-topup-{payment.id}"}
    assert AutoTopUpMonth.objects.get(user=alice).charged == Decimal("50.00")


@pytest.mark.parametrize(
    ("decline", "reason"),
    [
        ("card_declined", "card_declined (insufficient_funds)"),
        ("authentication_required", "authentication_required"),
    ],
)
def test_a_refused_card_fails_gives_the_amount_back_and_turns_it_off(
    client, stripe_api, alice, decline, reason
):
    save_card(client, alice, stripe_api)
    turn_on(alice)
    stripe_api.decline = decline
    assert auto_topup_run(now=NOV) == 1
    payment = Payment.objects.get(user=alice)
    assert payment.status == PaymentStatus.FAILED and payment.failure.startswith(reason)
    assert payment.provider_ref.startswith("pi_")
    assert AutoTopUpMonth.objects.get(user=alice).charged == 0
    assert not AutoTopUp.objects.get(user=alice).enabled
    failed = AutoTopUpEvent.objects.get(user=alice, kind=Kind.CHARGE_FAILED)
    assert "turned off" in failed.detail
    assert auto_topup_run(now=NOV) == 0 and len(stripe_api.intents) == 1
    assert balance_of(user=alice) == 0
    assert "turned off" in client.get("/credit/").content.decode()


def test_an_unanswered_charge_is_asked_again_with_the_same_idempotency_key(
    client, stripe_api, alice
):
    save_card(client, alice, stripe_api)
    turn_on(alice)
    stripe_api.down = True
    assert auto_topup_run(now=NOV) == 1
    payment = Payment.objects.get(user=alice)
    # Maybe charged, maybe not: neither failed nor given back, and nothing new is started.
    assert payment.status == PaymentStatus.PENDING and payment.provider_ref == ""
    assert AutoTopUp.objects.get(user=alice).enabled
    assert AutoTopUpMonth.objects.get(user=alice).charged == Decimal("50.00")
    assert AutoTopUpEvent.objects.filter(user=alice, kind=Kind.CHARGE_UNANSWERED).exists()
    stripe_api.down = False
    assert auto_topup_run(now=NOV) == 1
    assert Payment.objects.filter(user=alice).count() == 1
    keys = {r["idempotency_key"] for r in stripe_api.intents}
    assert keys == {f"auto-topup-{payment.id}"}
    payment.refresh_from_db()
    assert payment.provider_ref.startswith("pi_")
    assert post_signed(client, intent_event(payment)).json()["outcome"] == "credited"
    assert AutoTopUpMonth.objects.get(user=alice).charged == Decimal("50.00")


def test_a_charge_never_answered_for_a_day_is_given_up(client, stripe_api, alice):
    save_card(client, alice, stripe_api)
    turn_on(alice)
    stripe_api.down = True
    auto_topup_run(now=NOV)
    auto_topup_run(now=NOV + timedelta(hours=24))
    payment = Payment.objects.get(user=alice)
    assert payment.status == PaymentStatus.FAILED and "did not answer for a day" in payment.failure
    assert AutoTopUpMonth.objects.get(user=alice).charged == 0
    assert AutoTopUp.objects.get(user=alice).enabled


def test_a_failure_reported_later_by_webhook_fails_it_once(client, stripe_api, alice):
    save_card(client, alice, stripe_api)
    turn_on(alice)
    auto_topup_run(now=NOV)
    payment = Payment.objects.get(user=alice)
    payload = intent_event(payment, type="payment_intent.payment_failed")
    response = post_signed(client, payload)
    assert response.status_code == 200 and response.json()["outcome"] == "failed"
    assert post_signed(client, payload).json()["outcome"] == "duplicate"
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.FAILED and payment.failure == "card_declined"
    assert AutoTopUpMonth.objects.get(user=alice).charged == 0
    assert AutoTopUpEvent.objects.filter(user=alice, kind=Kind.CHARGE_FAILED).count() == 1


def test_forged_mismatched_and_foreign_intent_events_credit_nothing(client, stripe_api, alice):
    save_card(client, alice, stripe_api)
    turn_on(alice)
    auto_topup_run(now=NOV)
    payment = Payment.objects.get(user=alice)
    forged = post_signed(client, intent_event(payment), secret="whsec_forged")
    assert forged.status_code == 400 and "signature" in forged.json()["error"]
    more = post_signed(client, intent_event(payment, amount_received=500000))
    assert more.status_code == 400 and more.json()["error"].startswith("amount:")
    euros = post_signed(client, intent_event(payment, currency="eur"))
    assert euros.status_code == 400 and euros.json()["error"].startswith("currency:")
    other = post_signed(client, intent_event(payment, id="pi_someone_elses"))
    assert other.status_code == 400 and "not this payment" in other.json()["error"]
    # A PaymentIntent Checkout made for an ordinary top-up is not ours to act on.
    checkout_pi = intent_event(payment, metadata={})
    assert post_signed(client, checkout_pi).json()["outcome"] == "ignored"
    stale = stripe.WebhookSignature.generate_signature_header(
        intent_event(payment), SECRET, int(time.time()) - 3600
    )
    old = client.post(
        "/billing/webhooks/stripe/",
        data=intent_event(payment),
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=stale,
    )
    assert old.status_code == 400
    assert balance_of(user=alice) == 0
    assert AuditEvent.objects.filter(action="payment.webhook_refused").count() >= 4


def test_a_card_event_for_someone_elses_customer_is_not_kept(client, stripe_api, alice, bob):
    save_card(client, alice, stripe_api)
    # An event naming bob's user id but alice's Stripe customer (or none of ours).
    answer = post_signed(client, setup_succeeded(bob, "cus_not_ours"))
    assert answer.status_code == 200 and "not one of ours" in answer.json()["detail"]
    assert not AutoTopUp.objects.filter(user=bob).exists()
    answer = post_signed(
        client, setup_succeeded(bob, AutoTopUp.objects.get(user=alice).customer_ref)
    )
    assert "not one of ours" in answer.json()["detail"]


def test_turning_it_on_needs_a_card_and_sane_amounts(stripe_api, alice):
    with pytest.raises(AutoTopUpRefused) as refused:
        turn_on(alice)
    assert refused.value.field == "enabled"
    AutoTopUp.objects.create(user=alice, provider="stripe", payment_method_ref="pm_x")
    for kwargs, field in [
        ({"amount": "1.00"}, "amount"),  # below PAYMENT_MIN_AMOUNT
        ({"amount": "50.00", "cap": "40.00"}, "monthly_cap"),
        ({"threshold": "-1"}, "threshold"),
        ({"amount": "12.345"}, "amount"),
    ]:
        with pytest.raises(AutoTopUpRefused) as refused:
            turn_on(alice, **kwargs)
        assert refused.value.field == field, kwargs


def test_the_periodic_billing_job_runs_the_checks(stripe_api, alice):
    AutoTopUp.objects.create(
        user=alice, provider="stripe", customer_ref="cus_x", payment_method_ref="pm_card_visa"
    )
    turn_on(alice)
    enforce_limits()
    assert Payment.objects.filter(user=alice, kind=Payment.Kind.AUTO).count() == 1


# --- the API ----------------------------------------------------------------------


@pytest.fixture
def api_for(db):
    def make(user):
        _, raw = api_key_create(user=user, name="tests")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return api

    return make


def test_the_api_reads_and_sets_automatic_top_up(client, stripe_api, alice, bob, api_for):
    api = api_for(alice)
    body = api.get("/api/v1/auto-topup/").json()
    assert body["enabled"] is False and body["card"] is None and body["currency"] == "USD"
    refused = api.put(
        "/api/v1/auto-topup/",
        {"enabled": True, "threshold": "10.00", "amount": "50.00", "monthly_cap": "100.00"},
        format="json",
    )
    assert refused.status_code == 400 and "enabled" in json.dumps(refused.json())
    started = api.post("/api/v1/auto-topup/card/")
    assert started.status_code == 201
    assert started.json()["setup_url"].startswith("https://checkout.stripe.test/")
    customer = stripe_api.sessions[-1]["form"]["customer"]
    post_signed(client, setup_succeeded(alice, customer))
    ok = api.put(
        "/api/v1/auto-topup/",
        {"enabled": True, "threshold": "10.00", "amount": "50.00", "monthly_cap": "100.00"},
        format="json",
    )
    assert ok.status_code == 200, ok.content
    assert ok.json()["enabled"] is True and ok.json()["card"] == "visa ending 4242"
    cap = api.put(
        "/api/v1/auto-topup/",
        {"enabled": True, "threshold": "10.00", "amount": "50.00", "monthly_cap": "40.00"},
        format="json",
    )
    assert cap.status_code == 400 and "monthly_cap" in json.dumps(cap.json())
    # Bob sees his own (off), and cannot touch alice's.
    bobs = api_for(bob).get("/api/v1/auto-topup/")
    assert bobs.status_code == 200, bobs.content
    assert bobs.json()["enabled"] is False
    assert api.delete("/api/v1/auto-topup/card/").status_code == 204
    body = api.get("/api/v1/auto-topup/").json()
    assert body["enabled"] is False and body["card"] is None


def test_the_console_form_refuses_on_the_field(client, stripe_api, alice):
    client.force_login(alice)
    response = client.post(
        "/credit/auto-top-up/",
        {"enabled": "on", "threshold": "10", "amount": "50", "monthly_cap": "200"},
    )
    assert response.status_code == 400
    assert "enabled: save a card first" in response.content.decode()
