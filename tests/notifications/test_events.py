"""Each event, told by e-mail (Django's mail outbox: subject, text and HTML, the PUBLIC_URL
link) and by webhook (a real local HTTP server receives the signed POST)."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from gpurental.billing.models import Invoice
from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import Notification, WebhookDelivery, WebhookEndpoint
from gpurental.notifications.services import notify
from gpurental.notifications.webhooks import signature_verify
from gpurental.rentals.models import InstanceStatus, Reservation
from tests.factories import InstanceFactory, PlanFactory, period


def _instance(user):
    return InstanceFactory(
        user=user, name="trainer-<b>1</b>", status=InstanceStatus.FAILED, status_reason="no image"
    )


def _reservation(user):
    plan = PlanFactory()
    start = timezone.now() + timedelta(minutes=10)
    return Reservation.objects.create(
        user=user,
        plan=plan,
        gpu_model=plan.gpu_model,
        gpu_count=1,
        image=InstanceFactory(user=user).image,
        period=period(start, 2),
        price=Decimal("10.00"),
    )


def _invoice(user):
    return Invoice.objects.create(
        user=user,
        period_start=date(2026, 10, 1),
        period_end=date(2026, 11, 1),
        number="INV-2026-000007",
        status="issued",
        total=Decimal("123.45"),
        issued_at=timezone.now(),
    )


def _open_endpoint(user):
    """Another endpoint of the user's, its circuit open (turned off: it gets nothing)."""
    return WebhookEndpoint.objects.create(
        user=user,
        url="https://hooks.example.test/<b>1</b>",
        secret="whsec_x",
        is_active=False,
        circuit="open",
        circuit_opened_at=timezone.now(),
        consecutive_failures=20,
    )


# event → (context builder, text the e-mail must say, the link's path, a data check)
CASES = {
    "low_balance": (
        lambda u: {"balance": Decimal("3.5"), "hourly_burn": Decimal("2"), "hours_left": 1.75},
        "3.50",
        "/billing/invoices/",
        lambda d: d["balance"] == "3.50" and d["hours_left"] == "1.8",
    ),
    "spend_stopped": (
        lambda u: {"balance": Decimal("-1"), "instances": [_instance(u)]},
        "trainer-<b>1</b>",
        "/dashboard/",
        lambda d: d["instances"][0]["name"] == "trainer-<b>1</b>",
    ),
    "instance_failed": (
        lambda u: {"instance": _instance(u)},
        "no image",
        "/instances/",
        lambda d: d["instance"]["reason"] == "no image",
    ),
    "instance_unreachable": (
        lambda u: {"instance": _instance(u), "reason": "host silent"},
        "host silent",
        "/instances/",
        lambda d: d["instance"]["reason"] == "host silent",
    ),
    "instance_lost": (
        lambda u: {"instance": _instance(u), "reason": "host gone"},
        "host gone",
        "/instances/",
        lambda d: d["instance"]["reason"] == "host gone",
    ),
    "instance_recovered": (
        lambda u: {"instance": _instance(u), "reason": "/workspace from snapshot nightly"},
        "snapshot nightly",
        "/instances/",
        lambda d: d["instance"]["reason"] == "/workspace from snapshot nightly",
    ),
    "instance_recover_failed": (
        lambda u: {"instance": _instance(u), "reason": "no free A10G"},
        "no free A10G",
        "/instances/",
        lambda d: d["instance"]["reason"] == "no free A10G",
    ),
    "idle_warning": (
        lambda u: {
            "instance": _instance(u),
            "stop_at": timezone.now() + timedelta(minutes=5),
            "idle_minutes": 25,
        },
        "25 minutes",
        "/instances/",
        lambda d: d["idle_minutes"] == 25 and d["stop_at"],
    ),
    "workspace_expiring": (
        lambda u: {
            "instance": _instance(u),
            "delete_at": datetime(2026, 7, 1, 9, 30, tzinfo=UTC),
            "reason": "stopped since June",
        },
        "on 2026-07-01 at 09:30 UTC",
        "/instances/",
        lambda d: d["delete_at"] == "2026-07-01T09:30:00+00:00",
    ),
    "storage_unpaid": (
        lambda u: {
            "balance": Decimal("-0.25"),
            "credit_limit": Decimal("0"),
            "delete_at": datetime(2026, 7, 1, 9, 30, tzinfo=UTC),
            "stored": ["volume datasets", "workspace trainer"],
        },
        "deleted on 2026-07-01 at 09:30 UTC",
        "/billing/invoices/",
        lambda d: (
            d["stored"] == ["volume datasets", "workspace trainer"] and d["balance"] == "-0.25"
        ),
    ),
    "idle_stopped": (
        lambda u: {"instance": _instance(u), "idle_minutes": 30},
        "30 idle minutes",
        "/instances/",
        lambda d: d["idle_minutes"] == 30,
    ),
    "reservation_starting_soon": (
        lambda u: {"reservation": _reservation(u)},
        "starts at",
        "/reservations/",
        lambda d: d["reservation"]["status"] == "booked",
    ),
    "reservation_started": (
        lambda u: {"reservation": _reservation(u), "instance": _instance(u)},
        "has started",
        "/reservations/",
        lambda d: d["instance"]["name"] == "trainer-<b>1</b>",
    ),
    "reservation_ending": (
        lambda u: {"reservation": _reservation(u)},
        "ends at",
        "/reservations/",
        lambda d: d["reservation"]["end"],
    ),
    "invoice_issued": (
        lambda u: {"invoice": _invoice(u)},
        "INV-2026-000007",
        ".pdf",
        lambda d: d["invoice"]["total"] == "123.45",
    ),
    "payment_received": (
        lambda u: {"amount": Decimal("50"), "reference": "pi_123", "balance": Decimal("80")},
        "50.00",
        "/billing/invoices/",
        lambda d: d["amount"] == "50.00" and d["reference"] == "pi_123",
    ),
    "webhook_circuit_open": (
        lambda u: {"endpoint": _open_endpoint(u), "reason": "answered HTTP 502"},
        "answered HTTP 502",
        "/notifications/webhooks/",
        lambda d: d["endpoint"]["consecutive_failures"] == 20 and d["reason"],
    ),
}


def test_every_event_has_a_case_and_templates():
    assert set(CASES) == set(EVENTS)


@pytest.mark.parametrize("event", list(CASES))
def test_each_event_is_told_by_email_and_by_signed_webhook(event, alice, endpoint, receiver, fire):
    build, says, path, data_ok = CASES[event]
    context = build(alice)

    fire(notify, alice, event, **context)

    # E-mail: one message to alice, subject, text and HTML bodies, the link.
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["alice@example.com"]
    assert message.subject
    html = message.alternatives[0][0]
    assert message.alternatives[0][1] == "text/html"
    assert says in message.body
    assert "https://gpus.example.test/" in message.body
    assert path in message.body and "https://gpus.example.test/notifications/" in message.body
    assert 'href="https://gpus.example.test/' in html
    assert "<b>1</b>" not in html  # a hostile name is escaped in HTML
    # Webhook: one signed POST with the event and its data.
    assert len(receiver.requests) == 1
    request = receiver.requests[0]
    header = request["headers"]["X-Gpurental-Signature"]
    assert signature_verify(endpoint.secret, header, request["body"])
    assert not signature_verify("whsec_wrong", header, request["body"])
    body = receiver.events()[0]
    assert body["type"] == event
    assert data_ok(body["data"])
    assert body["link"].startswith("https://gpus.example.test/")
    assert request["headers"]["X-Gpurental-Event"] == event
    # Recorded: both channels sent.
    recorded = {n.channel: n.status for n in Notification.objects.filter(user=alice, event=event)}
    assert recorded == {"email": "sent", "webhook": "sent"}
    assert WebhookDelivery.objects.get().status == "delivered"


def test_payment_received_is_available_to_the_payments_code(alice, endpoint, receiver, fire):
    """The call the payments code makes when a payment is credited."""
    fire(
        notify,
        alice,
        "payment_received",
        amount=Decimal("25.00"),
        currency="USD",
        reference="cs_test_1",
        provider="stripe",
        balance=Decimal("25.00"),
    )
    assert mail.outbox[0].subject == "Payment received: 25.00 USD"
    assert receiver.events()[0]["data"]["provider"] == "stripe"
