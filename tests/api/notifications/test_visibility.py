"""Notifications, webhook endpoints and their deliveries keep the rules every resource
keeps (tests/api/resources.py)."""

from decimal import Decimal

import pytest

from gpurental.notifications.models import Notification, WebhookDelivery
from gpurental.notifications.services import endpoint_create, notify
from tests.api.resources import OwnedListRules, OwnedResourceRules, ResourceRules, UnknownIdRule


@pytest.fixture(autouse=True)
def loopback_webhooks(settings):
    settings.WEBHOOKS_ALLOW_PRIVATE = True  # the endpoints below are never posted to


def an_endpoint(owner):
    return endpoint_create(user=owner, url="http://127.0.0.1:9/hooks")


class TestWebhookEndpointRules(OwnedResourceRules):
    list_url = "/api/v1/webhooks/"

    def make(self, request, owner):
        return an_endpoint(owner)


class TestWebhookDeliveryRules(OwnedResourceRules):
    list_url = "/api/v1/webhook-deliveries/"

    def make(self, request, owner):
        endpoint = an_endpoint(owner)
        notify(owner, "payment_received", amount=Decimal("5"))
        return WebhookDelivery.objects.get(endpoint=endpoint)


class TestNotificationRules(OwnedListRules):
    """Listed only: a notification has no URL of its own."""

    list_url = "/api/v1/notifications/"

    def make(self, request, owner):
        notify(owner, "payment_received", amount=Decimal("5"))
        return Notification.objects.filter(user=owner).latest("created_at")


class TestNotificationPreferenceRules(UnknownIdRule, ResourceRules):
    """Per event, the person's own settings: every customer has one for each event, so
    there is no other customer's to hide; the 401 and the unknown event's 404 hold."""

    list_url = "/api/v1/notification-preferences/"
    unknown_id = "no_such_event"
