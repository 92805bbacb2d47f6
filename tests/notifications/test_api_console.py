"""The API and console pages: endpoints with the secret shown once, the delivery log with
re-send, preferences, and nobody else's objects (404)."""

from decimal import Decimal

import pytest
from django.core import mail
from rest_framework.test import APIClient

from gpurental.notifications.models import WebhookDelivery, WebhookEndpoint
from gpurental.notifications.services import notify
from gpurental.notifications.webhooks import signature_verify


@pytest.fixture
def api():
    def make(user):
        client = APIClient()
        client.force_authenticate(user=user)
        return client

    return make


def test_an_endpoint_is_created_with_its_secret_shown_once(alice, api, receiver, fire):
    client = api(alice)
    created = client.post("/api/v1/webhooks/", {"url": receiver.url}, format="json")
    assert created.status_code == 201, created.json()
    secret = created.json()["secret"]
    assert secret.startswith("whsec_")
    shown = client.get(f"/api/v1/webhooks/{created.json()['id']}/").json()
    assert "secret" not in shown
    assert "secret" not in client.get("/api/v1/webhooks/").json()["results"][0]
    # The secret shown is the one that signs.
    fire(notify, alice, "payment_received", amount=Decimal("5"))
    request = receiver.requests[0]
    assert signature_verify(secret, request["headers"]["X-Gpurental-Signature"], request["body"])


def test_a_private_url_is_refused_naming_the_field(alice, api, settings):
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    answer = api(alice).post("/api/v1/webhooks/", {"url": "http://10.0.0.1/x"}, format="json")
    assert answer.status_code == 400
    assert "private" in answer.json()["error"]["fields"]["url"][0]


def test_an_unknown_event_is_refused_naming_the_field(alice, api, receiver):
    answer = api(alice).post(
        "/api/v1/webhooks/", {"url": receiver.url, "events": ["nope"]}, format="json"
    )
    assert answer.status_code == 400
    assert "nope" in answer.json()["error"]["fields"]["events"][0]


def test_the_delivery_log_shows_attempts_and_resend_works(alice, api, endpoint, receiver, fire):
    receiver.codes = [500]
    fire(notify, alice, "payment_received", amount=Decimal("5"))
    client = api(alice)
    log = client.get(f"/api/v1/webhook-deliveries/?endpoint={endpoint.pk}").json()["results"]
    assert log[0]["status"] == "pending" and log[0]["attempt_log"][0]["status_code"] == 500
    again = client.post(f"/api/v1/webhook-deliveries/{log[0]['id']}/resend/")
    assert again.status_code == 200
    assert again.json()["status"] == "delivered"
    assert [a["status_code"] for a in again.json()["attempt_log"]] == [500, 200]


def test_another_users_endpoints_and_deliveries_are_404(alice, bob, api, endpoint, fire):
    fire(notify, alice, "payment_received", amount=Decimal("5"))
    delivery = WebhookDelivery.objects.get()
    client = api(bob)
    assert client.get(f"/api/v1/webhooks/{endpoint.pk}/").status_code == 404
    assert (
        client.patch(f"/api/v1/webhooks/{endpoint.pk}/", {"url": "http://x.test/"}).status_code
        == 404
    )
    assert client.delete(f"/api/v1/webhooks/{endpoint.pk}/").status_code == 404
    assert client.get(f"/api/v1/webhook-deliveries/{delivery.pk}/").status_code == 404
    assert client.post(f"/api/v1/webhook-deliveries/{delivery.pk}/resend/").status_code == 404
    assert client.get(f"/api/v1/webhook-deliveries/?endpoint={endpoint.pk}").status_code == 400
    assert client.get("/api/v1/webhooks/").json()["results"] == []
    assert client.get("/api/v1/webhook-deliveries/").json()["results"] == []
    assert client.get("/api/v1/notifications/").json()["results"] == []
    assert WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    # The console too.
    from django.test import Client

    browser = Client()
    browser.force_login(bob)
    assert browser.get(f"/notifications/webhooks/{endpoint.pk}/").status_code == 404
    assert browser.post(f"/notifications/deliveries/{delivery.pk}/resend/").status_code == 404
    assert browser.post(f"/notifications/webhooks/{endpoint.pk}/delete/").status_code == 404


def test_preferences_over_the_api(alice, api, fire):
    client = api(alice)
    prefs = client.get("/api/v1/notification-preferences/").json()
    assert all(p["email"] and p["webhook"] for p in prefs)
    changed = client.patch(
        "/api/v1/notification-preferences/invoice_issued/", {"email": False}, format="json"
    )
    assert changed.json() == {
        "event": "invoice_issued",
        "label": "Invoice issued",
        "email": False,
        "webhook": True,
    }
    assert client.get("/api/v1/notification-preferences/nope/").status_code == 404


def test_console_pages_create_an_endpoint_and_save_preferences(alice, receiver, fire):
    from django.test import Client

    browser = Client()
    browser.force_login(alice)
    page = browser.post("/notifications/webhooks/", {"url": receiver.url, "description": "ci"})
    endpoint = WebhookEndpoint.objects.get(user=alice)
    assert endpoint.secret in page.content.decode()  # once, on the page that created it
    assert endpoint.secret not in browser.get("/notifications/webhooks/").content.decode()
    browser.post("/notifications/", {"payment_received:webhook": "on"})
    fire(notify, alice, "payment_received", amount=Decimal("5"))
    assert mail.outbox == [] and len(receiver.requests) == 1
    detail = browser.get(f"/notifications/webhooks/{endpoint.pk}/").content.decode()
    assert "payment_received" in detail and "HTTP 200" in detail
    listing = browser.get("/notifications/").content.decode()
    assert "Payment received: 5.00" in listing


def test_a_hostile_endpoint_description_is_escaped(alice, receiver):
    from django.test import Client

    WebhookEndpoint.objects.create(
        user=alice, url=receiver.url, description="<script>x()</script>", secret="whsec_x"
    )
    browser = Client()
    browser.force_login(alice)
    page = browser.get("/notifications/webhooks/").content.decode()
    assert "<script>x()</script>" not in page and "&lt;script&gt;" in page
