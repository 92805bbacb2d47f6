"""Webhook deliveries: each try is one POST with one deadline for the whole transfer, and
its outcome is always recorded, also when the worker's time limit stops it. The endpoint
keeps the score: failures in a row push back every delivery to it (its backoff), and
WEBHOOKS_CIRCUIT_FAILURES of them open its circuit: nothing more is posted, pending and new
deliveries are skipped saying why, and its owner is told once."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.notifications import webhooks
from gpurental.notifications.models import (
    Notification,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEndpointEvent,
)
from gpurental.notifications.services.base import enqueue
from gpurental.notifications.services.endpoints import endpoint_event
from gpurental.notifications.webhooks import PostResult, WebhookRefused

# How long one worker holds a delivery it is posting: past it, another may try again. Far
# longer than an attempt can take (WEBHOOKS_TIMEOUT_S bounds the whole POST).
LEASE = timedelta(seconds=60)

Status = WebhookDelivery.Status
Circuit = WebhookEndpoint.Circuit


def backoff(attempt: int) -> timedelta:
    """Wait after the ``attempt``-th failure: base · 2^(n-1), capped (short, so that no
    Celery countdown comes near the broker's visibility timeout)."""
    base = settings.WEBHOOKS_RETRY_BASE_S
    return timedelta(seconds=min(base * 2 ** min(attempt - 1, 30), settings.WEBHOOKS_RETRY_MAX_S))


def circuit_reason(endpoint: WebhookEndpoint) -> str:
    """Why a delivery to ``endpoint`` was not posted (the delivery log shows it)."""
    return (
        f"not sent: the endpoint's circuit opened at {endpoint.circuit_opened_at.isoformat()} "
        "after failures in a row; re-enable the endpoint, then re-send what you need"
    )


def delivery_create(notification, endpoint, *, link: str, now: datetime) -> WebhookDelivery:
    """One event's delivery to one endpoint: due now, or skipped at once when the endpoint's
    circuit is open (kept, so that its owner sees what was missed and can re-send it)."""
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
    fields = {"status": Status.PENDING, "next_attempt_at": now}
    if endpoint.circuit == Circuit.OPEN:
        fields = {"status": Status.SKIPPED, "next_attempt_at": None}
        fields["reason"] = circuit_reason(endpoint)
    delivery = WebhookDelivery.objects.create(
        id=uuid.uuid4(),
        endpoint=endpoint,
        notification=notification,
        event=notification.event,
        body=body,
        created_at=now,
        **fields,
    )
    if delivery.status == Status.SKIPPED:
        _notification_refresh(notification.pk, now)
    return delivery


def delivery_attempt(
    *, delivery_id, now: datetime | None = None, resend: bool = False
) -> WebhookDelivery | None:
    """Post a due delivery once and record the outcome; None when it is not due (already
    delivered, given up, or taken by another worker). Returns it with ``next_attempt_at``
    set when another try is wanted. A delivery due while its endpoint backs off waits for
    the endpoint (no POST, no try spent), unless its owner re-sends it; one to an open
    circuit is skipped."""
    now = now or timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("endpoint")
            .filter(pk=delivery_id, status=Status.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if delivery is None:
            return None
        endpoint = delivery.endpoint
        if endpoint.circuit == Circuit.OPEN:
            _deliveries_skip(endpoint, now, pk=delivery.pk)
            delivery.refresh_from_db()
            return delivery
        if not resend and endpoint.retry_after is not None and endpoint.retry_after > now:
            delivery.next_attempt_at = endpoint.retry_after
            delivery.save(update_fields=["next_attempt_at"])
            taken = False
        else:
            # Taken: the lease keeps other workers off while the POST is out (no lock held).
            delivery.next_attempt_at = now + LEASE
            delivery.attempts += 1
            delivery.save(update_fields=["next_attempt_at", "attempts"])
            taken = True
    if not taken:
        _task_later(delivery)
        return delivery
    body = delivery.body.encode()
    started = time.monotonic()
    try:
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
    except BaseException as exc:
        # The worker's soft time limit (or its shutdown) stopped the POST: a failed try all
        # the same, so that the retry waits its turn instead of the lease's minute.
        stopped = PostResult(
            None,
            f"stopped before an answer by the worker's time limit or shutdown "
            f"({type(exc).__name__})",
            "",
            int((time.monotonic() - started) * 1000),
        )
        _attempt_record(delivery, stopped, now)
        raise
    return _attempt_record(delivery, result, now)


def _attempt_record(delivery: WebhookDelivery, result: PostResult, now: datetime):
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
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=delivery.endpoint_id)
        fields = {"last_status_code": result.status_code}
        if result.ok:
            fields.update(status=Status.DELIVERED, delivered_at=now, next_attempt_at=None)
            _endpoint_answered(endpoint)
        else:
            _endpoint_failed(endpoint, now)
            if number >= settings.WEBHOOKS_MAX_ATTEMPTS:
                fields.update(status=Status.FAILED, next_attempt_at=None)
            else:
                fields["next_attempt_at"] = max(now + backoff(number), endpoint.retry_after)
        # Only if nobody re-sent, finished or skipped it meanwhile (the attempt is ours).
        WebhookDelivery.objects.filter(
            pk=delivery.pk, attempts=number, status=Status.PENDING
        ).update(**fields)
        if (
            endpoint.circuit == Circuit.CLOSED
            and endpoint.consecutive_failures >= settings.WEBHOOKS_CIRCUIT_FAILURES
        ):
            endpoint_circuit_open(
                endpoint=endpoint,
                reason=f"{endpoint.consecutive_failures} failures in a row; the last: "
                + (result.error or f"answered HTTP {result.status_code}"),
                now=now,
            )
        _notification_refresh(delivery.notification_id, now)
    delivery.refresh_from_db()
    if delivery.next_attempt_at is not None and delivery.status == Status.PENDING:
        _task_later(delivery)
    return delivery


def _endpoint_answered(endpoint: WebhookEndpoint) -> None:
    """A 2xx: the endpoint's backoff starts afresh (an open circuit stays open: its owner
    re-enables it)."""
    if endpoint.consecutive_failures or endpoint.retry_after:
        endpoint.consecutive_failures = 0
        endpoint.retry_after = None
        endpoint.save(update_fields=["consecutive_failures", "retry_after"])


def _endpoint_failed(endpoint: WebhookEndpoint, now: datetime) -> None:
    """One more failure in a row: no delivery to it is tried before its backoff is over."""
    endpoint.consecutive_failures += 1
    wait_until = now + backoff(endpoint.consecutive_failures)
    endpoint.retry_after = max(wait_until, endpoint.retry_after or wait_until)
    endpoint.save(update_fields=["consecutive_failures", "retry_after"])


def endpoint_circuit_open(
    *, endpoint: WebhookEndpoint, reason: str, now: datetime | None = None
) -> WebhookEndpoint:
    """Stop posting to an endpoint that keeps failing: its pending deliveries are skipped
    (so are new ones, until its owner re-enables it), and its owner is told, once per
    opening. Opening an open circuit changes nothing."""
    from gpurental.notifications.services.notify import notify

    now = now or timezone.now()
    with transaction.atomic():
        locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        if locked.circuit == Circuit.OPEN:
            return locked
        locked.circuit = Circuit.OPEN
        locked.circuit_opened_at = now
        locked.save(update_fields=["circuit", "circuit_opened_at"])
        event = endpoint_event(
            locked, WebhookEndpointEvent.Kind.CIRCUIT_OPENED, reason=reason, now=now
        )
        _deliveries_skip(locked, now)
        notify(
            locked.user,
            "webhook_circuit_open",
            dedupe_key=f"circuit-{locked.pk}-{event.pk}",
            endpoint=locked,
            reason=reason,
        )
    for field in ("circuit", "circuit_opened_at", "consecutive_failures", "retry_after"):
        setattr(endpoint, field, getattr(locked, field))
    return locked


def _deliveries_skip(endpoint: WebhookEndpoint, now: datetime, pk=None) -> None:
    """Every pending delivery to ``endpoint`` (or only ``pk``) skipped, saying why."""
    pending = WebhookDelivery.objects.filter(endpoint=endpoint, status=Status.PENDING)
    if pk is not None:
        pending = pending.filter(pk=pk)
    notification_ids = set(pending.values_list("notification_id", flat=True))
    pending.update(status=Status.SKIPPED, next_attempt_at=None, reason=circuit_reason(endpoint))
    for notification_id in notification_ids:
        _notification_refresh(notification_id, now)


def _task_later(delivery: WebhookDelivery) -> None:
    wait = max((delivery.next_attempt_at - timezone.now()).total_seconds(), 0)
    enqueue("webhook_deliver", delivery.pk, countdown=wait)


def _notification_refresh(notification_id, now: datetime) -> None:
    """A webhook notification is sent once every delivery is, failed once any gave up or
    was skipped."""
    statuses = set(
        WebhookDelivery.objects.filter(notification_id=notification_id).values_list(
            "status", flat=True
        )
    )
    if statuses == {Status.DELIVERED}:
        status, sent_at = Notification.Status.SENT, now
    elif statuses & {Status.FAILED, Status.SKIPPED}:
        status, sent_at = Notification.Status.FAILED, None
    else:
        status, sent_at = Notification.Status.PENDING, None
    Notification.objects.filter(pk=notification_id).update(status=status, sent_at=sent_at)


def delivery_resend(*, delivery: WebhookDelivery, now: datetime | None = None) -> WebhookDelivery:
    """Post it again now, whatever became of it (the customer's button in the log), unless
    its endpoint's circuit is open: its owner re-enables the endpoint first."""
    now = now or timezone.now()
    endpoint = WebhookEndpoint.objects.get(pk=delivery.endpoint_id)
    if endpoint.circuit == Circuit.OPEN:
        raise WebhookRefused(
            _(
                "the endpoint's circuit is open (it failed too often in a row): re-enable "
                "the endpoint, then re-send"
            ),
            field="endpoint",
        )
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=Status.PENDING, next_attempt_at=now, reason=""
    )
    # The owner's call: not held back by the endpoint's backoff.
    return delivery_attempt(delivery_id=delivery.pk, now=now, resend=True) or delivery


def deliveries_due(*, now: datetime | None = None, limit: int = 200) -> list:
    """Ids of deliveries whose try is due: the beat sweep, for a task the broker lost."""
    now = now or timezone.now()
    return list(
        WebhookDelivery.objects.filter(status=Status.PENDING, next_attempt_at__lte=now).values_list(
            "pk", flat=True
        )[:limit]
    )
