"""Telling customers: ``notify`` (called where things happen), e-mail sending, webhook
endpoints, deliveries with retries and re-sends, and preferences."""

from __future__ import annotations

import json
import logging
import secrets
import time
import uuid
from datetime import datetime, timedelta
from urllib.parse import urljoin

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from gpurental.accounts.languages import language_for
from gpurental.accounts.models import AccountKind, User
from gpurental.notifications import webhooks
from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import (
    Channel,
    Notification,
    NotificationPreference,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from gpurental.notifications.webhooks import WebhookRefused
from gpurental.teams.selectors import team_managers

log = logging.getLogger(__name__)

# How long one worker holds a delivery it is posting: past it, another may try again.
LEASE = timedelta(seconds=60)


def public_link(path: str) -> str:
    """An absolute link for an e-mail or a webhook body, from the PUBLIC_URL setting."""
    return urljoin(settings.PUBLIC_URL.rstrip("/") + "/", path.lstrip("/"))


# --- preferences ---------------------------------------------------------------------


def preferences_of(*, user: User) -> dict[str, dict[str, bool]]:
    """Every event with its two switches (on unless the user turned it off)."""
    saved = {p.event: p for p in NotificationPreference.objects.filter(user=user)}
    return {
        name: {
            "email": saved[name].email if name in saved else True,
            "webhook": saved[name].webhook if name in saved else True,
        }
        for name in EVENTS
    }


def preference_set(
    *, user: User, event: str, email: bool | None = None, webhook: bool | None = None
) -> dict[str, bool]:
    if event not in EVENTS:
        raise WebhookRefused(
            _("unknown event %(event)r; events are: %(events)s")
            % {"event": event, "events": ", ".join(EVENTS)},
            field="event",
        )
    pref, _created = NotificationPreference.objects.get_or_create(user=user, event=event)
    if email is not None:
        pref.email = email
    if webhook is not None:
        pref.webhook = webhook
    pref.save(update_fields=["email", "webhook"])
    return {"email": pref.email, "webhook": pref.webhook}


# --- notify --------------------------------------------------------------------------


def notify(user: User, event: str, *, dedupe_key: str = "", **context) -> list[Notification]:
    """Tell ``user`` about ``event`` on each channel they keep on. E-mail and webhook POSTs
    leave from Celery tasks after the surrounding transaction commits; a failure here is
    logged and never breaks the caller (a stop or a failure must happen all the same)."""
    if user.kind == AccountKind.TEAM:
        # A team account reads no mail: its webhooks get the event, and its owners and
        # admins get the e-mail, each by their own preferences and language.
        made = _notify_safely(user, event, dedupe_key=dedupe_key, email=False, **context)
        for person in team_managers(account=user):
            made += _notify_safely(person, event, dedupe_key=dedupe_key, webhook=False, **context)
        return made
    return _notify_safely(user, event, dedupe_key=dedupe_key, **context)


def _notify_safely(user: User, event: str, **kwargs) -> list[Notification]:
    try:
        # In the user's language: the subject and the bodies are written now, not when sent.
        with translation.override(language_for(user)):
            return _notify(user, event, **kwargs)
    except Exception:
        log.exception("notification %s for user %s could not be prepared", event, user.pk)
        return []


def _notify(
    user: User, event: str, *, dedupe_key: str, email: bool = True, webhook: bool = True, **context
) -> list[Notification]:
    spec = EVENTS[event]
    data, path = spec.build(context)
    link = public_link(path)
    subject = spec.subject.format(**data)
    prefs = preferences_of(user=user)[event]
    now = timezone.now()
    made = []
    if email and prefs["email"] and user.email:
        made += _record(user, event, Channel.EMAIL, subject, data, dedupe_key, now, link=link)
    endpoints = [e for e in user.webhook_endpoints.filter(is_active=True) if e.wants(event)]
    if webhook and prefs["webhook"] and endpoints:
        made += _record(user, event, Channel.WEBHOOK, subject, data, dedupe_key, now, link=link)
    for notification in made:
        if notification.channel == Channel.EMAIL:
            _on_commit_task("email_send", notification.pk)
        else:
            for endpoint in endpoints:
                delivery = _delivery_create(notification, endpoint, link=link, now=now)
                _on_commit_task("webhook_deliver", delivery.pk)
    return made


def _record(user, event, channel, subject, data, dedupe_key, now, *, link) -> list[Notification]:
    fields = {"subject": subject[:255], "data": data, "created_at": now}
    if channel == Channel.EMAIL:
        context = {
            **data,
            "user": user,
            "subject": subject,
            "link": link,
            "public_url": settings.PUBLIC_URL,
            "preferences_link": public_link(reverse("notification_preferences")),
        }
        fields["text_body"] = render_to_string(f"notifications/{event}.txt", context)
        fields["html_body"] = render_to_string(f"notifications/{event}.html", context)
    try:
        with transaction.atomic():  # a savepoint: a duplicate leaves the caller's work alone
            return [
                Notification.objects.create(
                    user=user, event=event, channel=channel, dedupe_key=dedupe_key, **fields
                )
            ]
    except IntegrityError:
        return []  # this key was notified before


def _on_commit_task(name: str, pk) -> None:
    transaction.on_commit(lambda: _enqueue(name, pk))


def _enqueue(name: str, pk, countdown: float = 0) -> None:
    """Queue a task, never failing the caller (a stop or a failure that happened must not
    raise because the broker did not answer): what is not queued, the sweep finds."""
    from gpurental.notifications import tasks

    try:
        getattr(tasks, name).apply_async(args=[str(pk)], countdown=countdown)
    except Exception:
        log.exception("could not queue %s for %s; the sweep will", name, pk)


# --- e-mail ----------------------------------------------------------------------------


def email_send(*, notification_id, now: datetime | None = None) -> bool:
    """Send one e-mail notification, once: the row is taken while pending."""
    now = now or timezone.now()
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(skip_locked=True)
            .select_related("user")
            .filter(pk=notification_id, channel=Channel.EMAIL, status=Notification.Status.PENDING)
            .first()
        )
        if notification is None:
            return False
        message = EmailMultiAlternatives(
            subject=notification.subject,
            body=notification.text_body,
            to=[notification.user.email],
        )
        message.attach_alternative(notification.html_body, "text/html")
        try:
            message.send()
        except Exception as exc:  # the mail server's refusal, or none answering
            log.warning("e-mail %s to %s failed: %s", notification.pk, notification.user_id, exc)
            notification.status = Notification.Status.FAILED
            notification.error = f"{type(exc).__name__}: {exc}"[:1000]
        else:
            notification.status = Notification.Status.SENT
            notification.sent_at = now
        notification.save(update_fields=["status", "error", "sent_at"])
    return notification.status == Notification.Status.SENT


# --- webhook endpoints -----------------------------------------------------------------


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


def endpoint_create(
    *, user: User, url: str, description: str = "", events: list[str] | None = None
) -> WebhookEndpoint:
    """A new endpoint with its own secret (the caller shows it once, never again)."""
    webhooks.url_check(url)
    return WebhookEndpoint.objects.create(
        user=user,
        url=url.strip(),
        description=description,
        events=_events_check(events or []),
        secret="whsec_" + secrets.token_urlsafe(32),
    )


def endpoint_update(*, endpoint: WebhookEndpoint, **changes) -> WebhookEndpoint:
    if "url" in changes:
        webhooks.url_check(changes["url"])
        changes["url"] = changes["url"].strip()
    if "events" in changes:
        changes["events"] = _events_check(changes["events"] or [])
    for key, value in changes.items():
        setattr(endpoint, key, value)
    endpoint.save(update_fields=list(changes))
    return endpoint


def endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    endpoint.delete()


# --- deliveries ------------------------------------------------------------------------


def backoff(attempt: int) -> timedelta:
    """Wait after the ``attempt``-th failure: base · 2^(n-1), capped (short, so that no
    Celery countdown comes near the broker's visibility timeout)."""
    base = settings.WEBHOOKS_RETRY_BASE_S
    return timedelta(seconds=min(base * 2 ** (attempt - 1), settings.WEBHOOKS_RETRY_MAX_S))


def _delivery_create(notification, endpoint, *, link: str, now: datetime) -> WebhookDelivery:
    delivery_id = uuid.uuid4()
    body = json.dumps(
        {
            "id": str(notification.pk),
            "type": notification.event,
            "created": notification.created_at.isoformat(),
            "link": link,
            "data": notification.data,
        },
        separators=(",", ":"),
        sort_keys=True,
    )
    return WebhookDelivery.objects.create(
        id=delivery_id,
        endpoint=endpoint,
        notification=notification,
        event=notification.event,
        body=body,
        next_attempt_at=now,
        created_at=now,
    )


def delivery_attempt(*, delivery_id, now: datetime | None = None) -> WebhookDelivery | None:
    """Post a due delivery once and record the outcome; None when it is not due (already
    delivered, given up, or taken by another worker). Returns it with ``next_attempt_at``
    set when another try is wanted."""
    now = now or timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(
                pk=delivery_id,
                status=WebhookDelivery.Status.PENDING,
                next_attempt_at__lte=now,
            )
            .first()
        )
        if delivery is None:
            return None
        # Taken: the lease keeps other workers off while the POST is out (no lock held).
        delivery.next_attempt_at = now + LEASE
        delivery.attempts += 1
        delivery.save(update_fields=["next_attempt_at", "attempts"])
    endpoint = delivery.endpoint
    body = delivery.body.encode()
    result = webhooks.post(
        endpoint.url,
        body=body,
        headers={
            webhooks.SIGNATURE_HEADER: webhooks.signature_header(
                endpoint.secret, int(time.time()), body
            ),
            webhooks.EVENT_HEADER: delivery.event,
            webhooks.DELIVERY_HEADER: str(delivery.pk),
        },
        timeout=settings.WEBHOOKS_TIMEOUT_S,
    )
    number = delivery.attempts
    with transaction.atomic():
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            at=now,
            status_code=result.status_code,
            ok=result.ok,
            error=result.error or ("" if result.ok else f"answered HTTP {result.status_code}"),
            duration_ms=result.duration_ms,
            response_excerpt=result.excerpt,
        )
        fields = {"last_status_code": result.status_code}
        if result.ok:
            fields.update(status=WebhookDelivery.Status.DELIVERED, delivered_at=now)
            fields["next_attempt_at"] = None
        elif number >= settings.WEBHOOKS_MAX_ATTEMPTS:
            fields.update(status=WebhookDelivery.Status.FAILED, next_attempt_at=None)
        else:
            fields["next_attempt_at"] = now + backoff(number)
        # Only if nobody re-sent or finished it meanwhile (the attempt count is ours).
        WebhookDelivery.objects.filter(pk=delivery.pk, attempts=number).update(**fields)
        _notification_refresh(delivery.notification_id, now)
    delivery.refresh_from_db()
    if delivery.next_attempt_at is not None and delivery.status == WebhookDelivery.Status.PENDING:
        _on_commit_task_later(delivery)
    return delivery


def _on_commit_task_later(delivery: WebhookDelivery) -> None:
    wait = max((delivery.next_attempt_at - timezone.now()).total_seconds(), 0)
    _enqueue("webhook_deliver", delivery.pk, countdown=wait)


def _notification_refresh(notification_id, now: datetime) -> None:
    """A webhook notification is sent once every delivery is, failed once any gave up."""
    statuses = set(
        WebhookDelivery.objects.filter(notification_id=notification_id).values_list(
            "status", flat=True
        )
    )
    if statuses == {WebhookDelivery.Status.DELIVERED}:
        status, sent_at = Notification.Status.SENT, now
    elif WebhookDelivery.Status.FAILED in statuses:
        status, sent_at = Notification.Status.FAILED, None
    else:
        status, sent_at = Notification.Status.PENDING, None
    Notification.objects.filter(pk=notification_id).update(status=status, sent_at=sent_at)


def delivery_resend(*, delivery: WebhookDelivery, now: datetime | None = None) -> WebhookDelivery:
    """Post it again now, whatever became of it (the customer's button in the log)."""
    now = now or timezone.now()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=WebhookDelivery.Status.PENDING, next_attempt_at=now
    )
    return delivery_attempt(delivery_id=delivery.pk, now=now) or delivery


def emails_stuck(*, now: datetime | None = None, limit: int = 200) -> list:
    """Ids of e-mails still pending a minute after they were decided (their task was lost)."""
    now = now or timezone.now()
    return list(
        Notification.objects.filter(
            channel=Channel.EMAIL,
            status=Notification.Status.PENDING,
            created_at__lte=now - timedelta(minutes=1),
        ).values_list("pk", flat=True)[:limit]
    )


def deliveries_due(*, now: datetime | None = None, limit: int = 200) -> list:
    """Ids of deliveries whose try is due: the beat sweep, for a task the broker lost."""
    now = now or timezone.now()
    return list(
        WebhookDelivery.objects.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now
        ).values_list("pk", flat=True)[:limit]
    )
