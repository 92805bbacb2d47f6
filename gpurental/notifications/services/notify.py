"""Telling customers: ``notify`` (called where things happen), e-mail sending and
preferences."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from gpurental.accounts.languages import language_for
from gpurental.accounts.models import AccountKind, User
from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import Channel, Notification, NotificationPreference
from gpurental.notifications.services.base import on_commit_task, public_link
from gpurental.notifications.services.deliveries import delivery_create
from gpurental.notifications.webhooks import WebhookRefused
from gpurental.teams.selectors import team_managers

log = logging.getLogger(__name__)


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
            on_commit_task("email_send", notification.pk)
        else:
            for endpoint in endpoints:
                delivery = delivery_create(notification, endpoint, link=link, now=now)
                if delivery.next_attempt_at is not None:  # not skipped (an open circuit)
                    on_commit_task("webhook_deliver", delivery.pk)
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
