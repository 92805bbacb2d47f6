"""Top-up through Stripe Checkout: the checkout session is created through the real
``stripe`` library against a local HTTP server that answers like Stripe; credit comes
only from webhooks signed with the library's own signing code."""

from __future__ import annotations

import json
import secrets
import time
from decimal import Decimal

import pytest
import stripe
from django.core import mail
from django.db import IntegrityError
from rest_framework.test import APIClient

from gpurental.accounts.models import AuditEvent
from gpurental.accounts.services import api_key_create
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import LedgerEntry, Payment, PaymentEvent, PaymentStatus
from gpurental.billing.selectors import balance_of
from gpurental.rentals.services import lifecycle as lc
from tests.billing.stripe_server import StripeLikeServer

SECRET = "whsec_test_" + "s3cr3t" * 4
WEBHOOK = "/billing/webhooks/stripe/"


@pytest.fixture
def stripe_api(settings):
    with StripeLikeServer() as server:
        settings.PAYMENT_PROVIDER = "stripe"
        settings.STRIPE_SECRET_KEY = "sk_test_not_a_real_key"
        settings.STRIPE_WEBHOOK_SECRET = SECRET
        settings.STRIPE_API_BASE = server.url
        settings.BILLING_CURRENCY = "USD"
        yield server


@pytest.fixture
def client_for(db):
    """An APIClient with a new API key of ``user``."""

    def make(user):
        _, raw = api_key_create(user=user, name="tests")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return api

    return make


def event_payload(payment: Payment, *, type="checkout.session.completed", **session) -> str:
    obj = {
        "id": payment.provider_ref,
        "object": "checkout.session",
        "client_reference_id": str(payment.id),
        "metadata": {"payment_id": str(payment.id)},
        "amount_total": int(payment.amount * 100),
        "currency": payment.currency.lower(),
        "payment_status": "paid",
        "status": "complete",
    }
    obj.update(session)
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


def post_signed(client, payload: str, *, secret: str = SECRET, timestamp: int | None = None):
    header = stripe.WebhookSignature.generate_signature_header(payload, secret, timestamp)
    return client.post(
        WEBHOOK, data=payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )


def start_top_up(client, user, amount="20.00") -> Payment:
    client.force_login(user)
    response = client.post("/credit/top-up/", {"amount": amount})
    assert response.status_code == 302, response.content[:500]
    payment = Payment.objects.get(user=user)
    assert response["Location"] == f"https://checkout.stripe.test/c/pay/{payment.provider_ref}"
    return payment


def refusals():
    return AuditEvent.objects.filter(action="payment.webhook_refused")


@pytest.fixture
def celery_eager():
    """Tasks run in-process, as a worker would: the receipt e-mail is one."""
    from gpurental.celery_app import app

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = eager


def test_top_up_checkout_signed_webhook_credit_then_launch_is_allowed(
    celery_eager,
    client,
    stripe_api,
    alice,
    bob,
    plan,
    image,
    make_host,
    sent,
    django_capture_on_commit_callbacks,
):
    make_host("node1", plan.gpu_model)
    with pytest.raises(InsufficientBalance):
        lc.instance_launch(user=alice, image=image, plan=plan)

    payment = start_top_up(client, alice, "20.00")
    # The session was asked of "Stripe" over HTTP with the amount and currency of the row.
    [sent_session] = stripe_api.sessions
    form = sent_session["form"]
    assert sent_session["authorization"] == "Bearer sk_test_not_a_real_key"
    assert form["mode"] == "payment"
    assert form["line_items[0][price_data][unit_amount]"] == "2000"
    assert form["line_items[0][price_data][currency]"] == "usd"
    assert form["client_reference_id"] == str(payment.id)
    assert sent_session["idempotency_key"] == f"checkout-{payment.id}"
    assert payment.status == PaymentStatus.PENDING and payment.amount == Decimal("20.00")
    assert balance_of(user=alice) == 0  # the redirect back proves nothing: no credit yet

    with django_capture_on_commit_callbacks(execute=True):
        response = post_signed(client, event_payload(payment))
    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "credited"
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.PAID and payment.paid_at is not None
    assert balance_of(user=alice) == Decimal("20.00")
    assert payment.ledger_entry.kind == LedgerEntry.Kind.CREDIT
    assert AuditEvent.objects.filter(action="payment.paid", object_id=str(payment.pk)).exists()

    instance = lc.instance_launch(user=alice, image=image, plan=plan)
    assert instance.pk

    # A receipt: by mail (the "payment received" notification), and a page only its payer
    # can see, which the mail links to.
    [receipt] = mail.outbox
    assert receipt.to == [alice.email] and receipt.subject == "Payment received: 20.00 USD"
    assert payment.receipt_number in receipt.body and receipt.alternatives
    assert f"/credit/payments/{payment.pk}/" in receipt.body
    page = client.get(f"/credit/payments/{payment.pk}/")
    assert page.status_code == 200 and b"$20.00" in page.content
    assert payment.receipt_number.encode() in client.get("/credit/").content
    client.force_login(bob)
    assert client.get(f"/credit/payments/{payment.pk}/").status_code == 404


def test_a_replayed_or_duplicated_event_credits_once(client, stripe_api, alice):
    payment = start_top_up(client, alice, "15.00")
    payload = event_payload(payment)
    assert post_signed(client, payload).json()["outcome"] == "credited"
    again = post_signed(client, payload)  # Stripe retries with the same event id
    assert again.status_code == 200 and again.json()["outcome"] == "duplicate"
    # A second event for the same session (async_payment_succeeded after completed).
    other = post_signed(
        client, event_payload(payment, type="checkout.session.async_payment_succeeded")
    )
    assert other.json()["outcome"] == "already_paid"
    assert balance_of(user=alice) == Decimal("15.00")
    assert LedgerEntry.objects.filter(user=alice).count() == 1


@pytest.mark.backend
def test_the_database_refuses_a_second_row_for_one_event(alice):
    PaymentEvent.objects.create(
        provider="stripe", event_id="evt_1", event_type="x", outcome="ignored"
    )
    with pytest.raises(IntegrityError):
        PaymentEvent.objects.create(
            provider="stripe", event_id="evt_1", event_type="x", outcome="ignored"
        )


def test_a_wrong_signature_is_refused_and_audited(client, stripe_api, alice):
    payment = start_top_up(client, alice)
    response = post_signed(client, event_payload(payment), secret="whsec_forged")
    assert response.status_code == 400
    assert "signature" in response.json()["error"]
    assert balance_of(user=alice) == 0
    [audit] = refusals()
    assert audit.changes["reason"].startswith("signature:")
    assert SECRET not in json.dumps(audit.changes)
    assert not PaymentEvent.objects.exists()


def test_a_missing_signature_or_a_tampered_body_is_refused(client, stripe_api, alice):
    payment = start_top_up(client, alice, "10.00")
    payload = event_payload(payment)
    header = stripe.WebhookSignature.generate_signature_header(payload, SECRET)
    tampered = payload.replace('"amount_total": 1000', '"amount_total": 100000')
    assert tampered != payload
    response = client.post(
        WEBHOOK, data=tampered, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )
    assert response.status_code == 400
    # From another address: refusals are coalesced per address and minute (anyone can post).
    unsigned = client.post(
        WEBHOOK, data=payload, content_type="application/json", REMOTE_ADDR="192.0.2.12"
    )
    assert unsigned.status_code == 400
    assert refusals().count() == 2 and balance_of(user=alice) == 0


def test_an_unknown_event_type_credits_nothing_and_is_recorded(client, stripe_api, alice):
    payment = start_top_up(client, alice)
    response = post_signed(client, event_payload(payment, type="charge.dispute.created"))
    assert response.status_code == 200
    assert response.json()["outcome"] == "ignored"
    assert balance_of(user=alice) == 0
    assert Payment.objects.get().status == PaymentStatus.PENDING
    event = PaymentEvent.objects.get()
    assert event.event_type == "charge.dispute.created" and event.outcome == "ignored"
    assert AuditEvent.objects.filter(action="payment.webhook_ignored").count() == 1


def test_an_amount_mismatch_is_refused_and_audited(client, stripe_api, alice):
    payment = start_top_up(client, alice, "20.00")
    response = post_signed(client, event_payload(payment, amount_total=200))
    assert response.status_code == 400
    assert response.json()["error"] == (
        "amount: the event says 2.00 USD, the payment is for 20.00 USD"
    )
    assert balance_of(user=alice) == 0
    assert Payment.objects.get().status == PaymentStatus.PENDING
    [audit] = refusals()
    assert audit.object_id == str(payment.pk) and audit.changes["reason"].startswith("amount:")
    assert PaymentEvent.objects.get().outcome == "refused"


def test_a_currency_mismatch_is_refused_and_audited(client, stripe_api, alice):
    payment = start_top_up(client, alice, "20.00")
    response = post_signed(client, event_payload(payment, currency="eur"))
    assert response.status_code == 400
    assert response.json()["error"].startswith("currency: the event says EUR")
    assert balance_of(user=alice) == 0
    assert refusals().get().changes["reason"].startswith("currency:")


def test_a_replay_older_than_the_tolerance_is_refused(client, stripe_api, alice, settings):
    payment = start_top_up(client, alice)
    old = int(time.time()) - settings.STRIPE_WEBHOOK_TOLERANCE - 5
    response = post_signed(client, event_payload(payment), timestamp=old)
    assert response.status_code == 400
    assert "tolerance" in response.json()["error"].lower()
    assert balance_of(user=alice) == 0
    assert refusals().count() == 1
    # The same event signed now goes through: the refusal was about the age alone.
    assert post_signed(client, event_payload(payment)).json()["outcome"] == "credited"


def test_an_event_for_an_unknown_payment_is_refused(client, stripe_api, alice):
    payment = start_top_up(client, alice)
    payload = event_payload(payment, client_reference_id=None, metadata={})
    response = post_signed(client, payload)
    assert response.status_code == 400 and response.json()["error"].startswith("payment:")
    assert balance_of(user=alice) == 0


def test_without_stripe_keys_the_console_says_top_up_is_not_available(client, alice, settings):
    settings.PAYMENT_PROVIDER = "stripe"
    settings.STRIPE_SECRET_KEY = settings.STRIPE_WEBHOOK_SECRET = ""
    client.force_login(alice)
    page = client.get("/credit/")
    assert page.status_code == 200
    assert b"Top-up is not available" in page.content
    refused = client.post("/credit/top-up/", {"amount": "20"})
    assert refused.status_code == 400 and b"Top-up is not available" in refused.content
    assert not Payment.objects.exists()
    assert client.post(WEBHOOK, data="{}", content_type="application/json").status_code == 503
    settings.PAYMENT_PROVIDER = "none"
    assert b"PAYMENT_PROVIDER=none" in client.get("/credit/").content


def test_an_unreachable_provider_is_a_clear_error(client, alice, settings):
    settings.STRIPE_SECRET_KEY, settings.STRIPE_WEBHOOK_SECRET = "sk_test_x", SECRET
    with StripeLikeServer() as server:
        closed = server.url
    settings.STRIPE_API_BASE = closed  # nothing listens there any more
    client.force_login(alice)
    response = client.post("/credit/top-up/", {"amount": "20"})
    assert response.status_code == 400
    assert b"the payment provider did not answer" in response.content
    assert balance_of(user=alice) == 0


def test_the_amount_is_checked_naming_the_field_and_the_rule(client, stripe_api, alice):
    client.force_login(alice)
    response = client.post("/credit/top-up/", {"amount": "1.00"})
    assert response.status_code == 400 and b"amount:" in response.content
    assert not Payment.objects.exists() and not stripe_api.sessions


def test_api_top_up_answers_the_checkout_url_and_payments_are_private(
    client_for, stripe_api, alice, bob
):
    as_alice, as_bob = client_for(alice), client_for(bob)
    response = as_alice.post("/api/v1/payments/", {"amount": "25.00"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["checkout_url"].startswith("https://checkout.stripe.test/c/pay/cs_test_")
    assert body["amount"] == "25.00" and body["status"] == "pending"
    assert as_alice.get(f"/api/v1/payments/{body['id']}/").status_code == 200
    assert as_bob.get(f"/api/v1/payments/{body['id']}/").status_code == 404
    assert as_bob.get("/api/v1/payments/").json()["results"] == []

    bad = as_alice.post("/api/v1/payments/", {"amount": "99999999"}, format="json")
    assert bad.status_code == 400
    assert "amount" in bad.json()["error"]["fields"]


def test_api_top_up_without_keys_is_a_409_in_the_error_shape(client_for, alice, settings):
    settings.STRIPE_SECRET_KEY = ""
    response = client_for(alice).post("/api/v1/payments/", {"amount": "25.00"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "payments_unavailable"
    assert "not available" in response.json()["error"]["message"]
