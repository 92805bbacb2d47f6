"""An endpoint that keeps failing: the wait is the endpoint's, not each delivery's; after
WEBHOOKS_CIRCUIT_FAILURES failures in a row its circuit opens (nothing more is posted, its
owner is told once), and its owner re-enables it from the API or the console."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from gpurental.notifications import services
from gpurental.notifications.models import Notification, WebhookDelivery, WebhookEndpoint
from gpurental.notifications.services import delivery_attempt, endpoint_reenable, notify


def _pay(fire, user, reference):
    fire(notify, user, "payment_received", amount=Decimal("10"), reference=reference)


def _due(delivery_id, now):
    """One worker's try of a delivery at ``now`` (as its task would run it then)."""
    return delivery_attempt(delivery_id=delivery_id, now=now)


@pytest.fixture
def circuit_after_3(settings):
    settings.WEBHOOKS_CIRCUIT_FAILURES = 3
    settings.WEBHOOKS_MAX_ATTEMPTS = 10


def test_a_failing_endpoint_holds_back_every_delivery_to_it_not_just_the_one_that_failed(
    alice, endpoint, receiver, fire
):
    receiver.codes = [500] * 10
    _pay(fire, alice, "r1")
    first = WebhookDelivery.objects.get()
    failed_at = first.attempt_log.get().at
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 1
    assert endpoint.retry_after == failed_at + timedelta(seconds=10)

    # A second event, due at once: it waits for the endpoint's backoff, without a POST and
    # without spending one of its tries.
    _pay(fire, alice, "r2")
    second = WebhookDelivery.objects.exclude(pk=first.pk).get()
    assert len(receiver.requests) == 1
    assert second.attempts == 0 and second.status == "pending"
    assert second.next_attempt_at == endpoint.retry_after

    # Both are tried when the endpoint's wait is over; the second failure doubles its wait.
    later = endpoint.retry_after
    _due(first.pk, later)
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 2
    assert endpoint.retry_after == later + timedelta(seconds=20)
    deferred = _due(second.pk, later)
    assert deferred.attempts == 0 and deferred.next_attempt_at == endpoint.retry_after
    assert len(receiver.requests) == 2


def test_one_answer_resets_the_endpoints_backoff(alice, endpoint, receiver, fire):
    receiver.codes = [500]
    _pay(fire, alice, "r1")
    delivery = WebhookDelivery.objects.get()
    _due(delivery.pk, delivery.next_attempt_at)
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 0 and endpoint.retry_after is None


def test_the_circuit_opens_after_n_failures_in_a_row_and_the_owner_is_told_once(
    alice, endpoint, receiver, fire, circuit_after_3
):
    receiver.codes = [500] * 10
    for reference in ("r1", "r2", "r3"):
        _pay(fire, alice, reference)
    mail.outbox.clear()  # the payment e-mails
    now = timezone.now()
    for _ in range(3):
        endpoint.refresh_from_db()
        if endpoint.circuit == "open":
            break
        now = max(now, endpoint.retry_after) + timedelta(seconds=1)
        for delivery in WebhookDelivery.objects.filter(status="pending"):
            fire(_due, delivery.pk, now)  # and what it leaves for after the commit
    endpoint.refresh_from_db()
    assert endpoint.circuit == "open" and endpoint.consecutive_failures == 3
    assert len(receiver.requests) == 3
    # Nothing left to try: each delivery is skipped, saying why and what to do.
    deliveries = list(WebhookDelivery.objects.all())
    assert {d.status for d in deliveries} == {"skipped"}
    assert all(d.next_attempt_at is None for d in deliveries)
    assert "circuit" in deliveries[0].reason and "re-enable" in deliveries[0].reason
    assert set(Notification.objects.filter(channel="webhook").values_list("status", flat=True)) == {
        "failed"
    }
    # The state change is an event row with its reason.
    event = endpoint.event_log.get(kind="circuit_opened")
    assert "3 failures in a row" in event.reason
    # The owner is told by e-mail, once.
    told = [m for m in mail.outbox if endpoint.url in m.body]
    assert len(told) == 1 and "circuit" in told[0].subject.lower()

    # A new event is kept, skipped, not posted; and the owner is not told again.
    _pay(fire, alice, "r4")
    newest = WebhookDelivery.objects.order_by("-created_at").first()
    assert newest.status == "skipped" and newest.attempts == 0
    assert len(receiver.requests) == 3
    assert len([m for m in mail.outbox if endpoint.url in m.body]) == 1
    assert (
        Notification.objects.filter(
            user=alice, event="webhook_circuit_open", channel="email"
        ).count()
        == 1
    )


def _open(endpoint, now=None):
    """The circuit of ``endpoint`` opened by the service that failures call."""
    services.endpoint_circuit_open(
        endpoint=endpoint, reason="3 failures in a row", now=now or timezone.now()
    )
    endpoint.refresh_from_db()
    return endpoint


def test_reenabling_closes_the_circuit_and_deliveries_go_out_again(
    alice, endpoint, receiver, fire, circuit_after_3
):
    _open(endpoint)
    _pay(fire, alice, "r1")
    assert WebhookDelivery.objects.get(event="payment_received").status == "skipped"

    endpoint_reenable(endpoint=endpoint, by=alice)
    endpoint.refresh_from_db()
    assert endpoint.circuit == "closed" and endpoint.consecutive_failures == 0
    assert endpoint.retry_after is None
    assert list(endpoint.event_log.values_list("kind", flat=True).order_by("at", "pk")) == [
        "created",
        "circuit_opened",
        "reenabled",
    ]
    assert endpoint.event_log.get(kind="reenabled").by == alice
    # Enabling twice changes nothing the second time.
    endpoint_reenable(endpoint=endpoint, by=alice)
    assert endpoint.event_log.filter(kind="reenabled").count() == 1
    # New events are posted again, and a skipped one can be re-sent.
    _pay(fire, alice, "r2")
    assert len(receiver.requests) == 1
    skipped = WebhookDelivery.objects.get(status="skipped", event="payment_received")
    assert services.delivery_resend(delivery=skipped).status == "delivered"


def test_the_api_lists_an_open_circuit_and_reenables_it(alice, bob, endpoint, circuit_after_3):
    _open(endpoint)
    client = APIClient()
    client.force_authenticate(user=alice)
    listed = client.get("/api/v1/webhooks/").json()["results"][0]
    assert listed["circuit"] == "open" and listed["circuit_opened_at"]
    # Nobody else's.
    other = APIClient()
    other.force_authenticate(user=bob)
    assert other.post(f"/api/v1/webhooks/{endpoint.pk}/reenable/").status_code == 404
    # A re-send while the circuit is open is refused, saying what to do.
    notify(alice, "payment_received", amount=Decimal("10"))
    skipped = WebhookDelivery.objects.get(event="payment_received")
    refused = client.post(f"/api/v1/webhook-deliveries/{skipped.pk}/resend/")
    assert refused.status_code == 400
    assert "re-enable" in refused.json()["error"]["fields"]["endpoint"][0]
    answer = client.post(f"/api/v1/webhooks/{endpoint.pk}/reenable/")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["circuit"] == "closed" and answer.json()["circuit_opened_at"] is None
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).circuit == "closed"


def test_the_console_shows_an_open_circuit_and_reenables_it(alice, bob, endpoint, circuit_after_3):
    _open(endpoint)
    browser = Client()
    browser.force_login(alice)
    listing = browser.get("/notifications/webhooks/").content.decode()
    assert "Circuit open" in listing
    detail = browser.get(f"/notifications/webhooks/{endpoint.pk}/").content.decode()
    assert "Circuit open" in detail and "Re-enable" in detail
    intruder = Client()
    intruder.force_login(bob)
    assert intruder.post(f"/notifications/webhooks/{endpoint.pk}/reenable/").status_code == 404
    answer = browser.post(f"/notifications/webhooks/{endpoint.pk}/reenable/")
    assert answer.status_code == 302
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).circuit == "closed"
    assert "Circuit open" not in browser.get("/notifications/webhooks/").content.decode()
