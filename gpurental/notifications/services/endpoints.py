"""Webhook endpoints as their owner changes them: create, change, delete, re-enable after
their circuit opened. Each change of state is written as a ``WebhookEndpointEvent``."""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.notifications import webhooks
from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import WebhookEndpoint, WebhookEndpointEvent
from gpurental.notifications.webhooks import WebhookRefused

Kind = WebhookEndpointEvent.Kind


def endpoint_event(
    endpoint: WebhookEndpoint,
    kind: str,
    *,
    reason: str = "",
    by: User | None = None,
    now: datetime | None = None,
) -> WebhookEndpointEvent:
    return WebhookEndpointEvent.objects.create(
        endpoint=endpoint, kind=kind, reason=reason[:500], by=by, at=now or timezone.now()
    )


def _events_check(events: list[str]) -> list[str]:
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise WebhookRefused(
            _(
                "unknown event(s) %(unknown)s; events are: %(events)s "
                "(an empty list means every event)"
            )
            % {"unknown": ", ".join(unknown), "events": ", ".join(EVENTS)},
            field="events",
        )
    return list(dict.fromkeys(events))


@transaction.atomic
def endpoint_create(
    *, user: User, url: str, description: str = "", events: list[str] | None = None
) -> WebhookEndpoint:
    """A new endpoint with its own secret (the caller shows it once, never again)."""
    webhooks.url_check(url)
    endpoint = WebhookEndpoint.objects.create(
        user=user,
        url=url.strip(),
        description=description,
        events=_events_check(events or []),
        secret="whsec_" + secrets.token_urlsafe(32),
    )
    endpoint_event(endpoint, Kind.CREATED, reason=endpoint.url, now=endpoint.created_at)
    return endpoint


@transaction.atomic
def endpoint_update(*, endpoint: WebhookEndpoint, **changes) -> WebhookEndpoint:
    if "url" in changes:
        webhooks.url_check(changes["url"])
        changes["url"] = changes["url"].strip()
    if "events" in changes:
        changes["events"] = _events_check(changes["events"] or [])
    changed = {key: value for key, value in changes.items() if getattr(endpoint, key) != value}
    for key, value in changed.items():
        setattr(endpoint, key, value)
    if changed:
        endpoint.save(update_fields=list(changed))
        endpoint_event(
            endpoint,
            Kind.CHANGED,
            reason=", ".join(f"{key}={value!r}" for key, value in sorted(changed.items())),
        )
    return endpoint


def endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    endpoint.delete()


def endpoint_reenable(
    *, endpoint: WebhookEndpoint, by: User | None = None, now: datetime | None = None
) -> WebhookEndpoint:
    """Close the endpoint's circuit (its owner says it answers again): new events are
    posted to it, its backoff starts afresh. Deliveries skipped meanwhile stay skipped;
    each can be re-sent. Enabling a closed circuit changes nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        if locked.circuit == WebhookEndpoint.Circuit.OPEN:
            opened = locked.circuit_opened_at
            locked.circuit = WebhookEndpoint.Circuit.CLOSED
            locked.circuit_opened_at = None
            locked.consecutive_failures = 0
            locked.retry_after = None
            locked.save(
                update_fields=[
                    "circuit",
                    "circuit_opened_at",
                    "consecutive_failures",
                    "retry_after",
                ]
            )
            reason = f"circuit open since {opened.isoformat()}"
            endpoint_event(locked, Kind.REENABLED, reason=reason, by=by, now=now)
    endpoint.refresh_from_db()
    return endpoint
