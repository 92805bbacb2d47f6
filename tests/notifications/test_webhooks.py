"""Webhook deliveries: retries with backoff, the attempt log, re-send, preferences, and the
URL rule (no private addresses)."""

import os
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail

from gpurental.notifications import services
from gpurental.notifications.models import Notification, WebhookDelivery
from gpurental.notifications.services import delivery_attempt, delivery_resend, notify
from gpurental.notifications.webhooks import WebhookRefused, signature_verify, url_check


def _pay(fire, user):
    fire(notify, user, "payment_received", amount=Decimal("10"), reference="r1")


def test_a_failing_endpoint_is_retried_with_growing_waits_until_it_answers(
    alice, endpoint, receiver, fire
):
    receiver.codes = [500, 503, 500]
    _pay(fire, alice)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and delivery.attempts == 1
    first_wait = delivery.next_attempt_at - delivery.attempt_log.get().at
    assert first_wait == timedelta(seconds=10)

    # Not due yet: a task that comes early (or twice) posts nothing.
    assert (
        delivery_attempt(
            delivery_id=delivery.pk, now=delivery.next_attempt_at - timedelta(seconds=1)
        )
        is None
    )
    waits = [first_wait]
    for _ in range(2):
        due = delivery.next_attempt_at
        delivery = delivery_attempt(delivery_id=delivery.pk, now=due)
        if delivery.next_attempt_at and delivery.status == "pending":
            waits.append(delivery.next_attempt_at - due)
    assert waits == [timedelta(seconds=10), timedelta(seconds=20), timedelta(seconds=40)]
    assert delivery.status == "pending"
    delivery = delivery_attempt(delivery_id=delivery.pk, now=delivery.next_attempt_at)
    assert delivery.status == "delivered" and delivery.attempts == 4
    log = list(delivery.attempt_log.values_list("number", "status_code", "ok"))
    assert log == [(1, 500, False), (2, 503, False), (3, 500, False), (4, 200, True)]
    # Every attempt posted the same body (same event id), each validly signed.
    assert len({r["body"] for r in receiver.requests}) == 1
    for request in receiver.requests:
        assert signature_verify(
            endpoint.secret, request["headers"]["X-Gpurental-Signature"], request["body"]
        )
    assert Notification.objects.get(channel="webhook").status == "sent"


def test_the_waits_are_capped_and_the_delivery_gives_up_after_the_last_try(
    alice, endpoint, receiver, fire, settings
):
    settings.WEBHOOKS_RETRY_MAX_S = 15
    receiver.codes = [500] * 10
    _pay(fire, alice)
    delivery = WebhookDelivery.objects.get()
    while delivery.status == "pending":
        due = delivery.next_attempt_at
        delivery = delivery_attempt(delivery_id=delivery.pk, now=due)
        if delivery.status == "pending":
            assert delivery.next_attempt_at - due <= timedelta(seconds=15)
    assert delivery.status == "failed" and delivery.attempts == settings.WEBHOOKS_MAX_ATTEMPTS
    assert delivery.next_attempt_at is None
    assert Notification.objects.get(channel="webhook").status == "failed"


def test_an_endpoint_that_does_not_answer_is_logged_with_the_error(alice, fire, receiver):
    dead = services.endpoint_create(user=alice, url="http://127.0.0.1:9/nothing-listens")
    _pay(fire, alice)
    attempt = WebhookDelivery.objects.get(endpoint=dead).attempt_log.get()
    assert attempt.status_code is None and "ConnectionRefused" in attempt.error


def test_a_failed_delivery_is_sent_again_from_the_log(alice, endpoint, receiver, fire, settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    receiver.codes = [500]
    _pay(fire, alice)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "failed"
    delivery = delivery_resend(delivery=delivery)
    assert delivery.status == "delivered"
    assert [r["body"] for r in receiver.requests][0] == receiver.requests[1]["body"]
    assert list(delivery.attempt_log.values_list("status_code", flat=True)) == [500, 200]


def test_an_email_preference_off_sends_no_email_but_the_webhook(alice, endpoint, receiver, fire):
    services.preference_set(user=alice, event="payment_received", email=False)
    _pay(fire, alice)
    assert mail.outbox == []
    assert len(receiver.requests) == 1
    assert list(Notification.objects.values_list("channel", flat=True)) == ["webhook"]


def test_a_webhook_preference_off_posts_nothing_but_the_email(alice, endpoint, receiver, fire):
    services.preference_set(user=alice, event="payment_received", webhook=False)
    _pay(fire, alice)
    assert len(mail.outbox) == 1
    assert receiver.requests == []
    assert WebhookDelivery.objects.count() == 0


def test_an_endpoint_gets_only_the_events_it_asked_for(alice, receiver, fire):
    services.endpoint_create(user=alice, url=receiver.url, events=["invoice_issued"])
    _pay(fire, alice)
    assert receiver.requests == []


def test_preferences_of_one_user_leave_another_alone(alice, bob, fire):
    services.preference_set(user=alice, event="payment_received", email=False)
    _pay(fire, bob)
    assert [m.to for m in mail.outbox] == [["bob@example.com"]]


def test_the_same_key_is_notified_once(alice, fire):
    for _ in range(2):
        fire(notify, alice, "payment_received", amount=Decimal("1"), dedupe_key="once")
    assert len(mail.outbox) == 1


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://127.0.0.1:8000/x", "loopback"),
        ("http://localhost/x", "loopback"),
        ("http://10.1.2.3/x", "private"),
        ("http://192.168.0.1/x", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::1]/x", "loopback"),
        ("http://[::ffff:127.0.0.1]/x", "loopback"),
        ("http://0.0.0.0/x", "unspecified"),
    ],
)
def test_private_addresses_are_refused_in_production(settings, url, says):
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    with pytest.raises(WebhookRefused) as refused:
        url_check(url)
    assert says in refused.value.message and refused.value.field == "url"


@pytest.mark.parametrize("url", ["ftp://example.com/", "javascript:alert(1)", "http:///nohost"])
def test_urls_that_are_not_http_are_refused(url):
    with pytest.raises(WebhookRefused):
        url_check(url)


def test_a_public_address_is_accepted(settings):
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    assert url_check("https://8.8.8.8/hook").address == "8.8.8.8"


def test_a_delivery_to_a_url_that_became_private_is_refused_at_sending(
    alice, endpoint, receiver, fire, settings
):
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    _pay(fire, alice)
    attempt = WebhookDelivery.objects.get().attempt_log.get()
    assert attempt.error.startswith("refused:") and receiver.requests == []


def test_allow_private_is_off_by_default_without_debug():
    code = "from gpurental import settings; print(settings.WEBHOOKS_ALLOW_PRIVATE)"
    env = {**os.environ, "DEBUG": "0", "WEBHOOKS_ALLOW_PRIVATE": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "False", out.stderr[-500:]
