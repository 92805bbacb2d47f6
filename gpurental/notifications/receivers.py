"""What notifications does when accounts ends every session of a person
(``accounts.credentials.credentials_revoked``)."""

from __future__ import annotations

from django.dispatch import receiver
from django.utils.translation import gettext as _

from gpurental.accounts.credentials import credentials_revoked
from gpurental.notifications import services
from gpurental.notifications.models import WebhookEndpoint


@receiver(credentials_revoked, dispatch_uid="notifications.credentials_revoked")
def revoked_credentials_pause_webhooks(sender, user, **kwargs) -> list[str]:
    """Turn off the person's webhook endpoints until they turn them on again: whoever held
    the old credentials may have added one, or pointed one elsewhere, to read the
    account's events. Their secrets stay: the owner's receivers need no change. (A team's
    endpoints are the team's, changed by its admins: left as they are.)"""
    endpoints = list(WebhookEndpoint.objects.filter(user=user, is_active=True).order_by("url"))
    for endpoint in endpoints:
        services.endpoint_update(endpoint=endpoint, is_active=False)
    if not endpoints:
        return []
    return [
        "\n".join(
            [
                _(
                    "Webhook endpoints turned off: check each URL, then turn it on again in "
                    "the console (Notifications) or with PATCH is_active=true:"
                ),
                *(f"  - {endpoint.url}" for endpoint in endpoints),
            ]
        )
    ]
