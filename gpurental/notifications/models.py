"""Preferences, the record of every notification sent, webhook endpoints and deliveries."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class NotificationPreference(models.Model):
    """One user's choice for one event. No row: both channels on (the default)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    event = models.CharField(max_length=40)
    email = models.BooleanField(default=True)
    webhook = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "event"], name="notification_pref_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.event}"


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class Notification(models.Model):
    """One event told to one user on one channel (append-only apart from its status)."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=40)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    subject = models.CharField(max_length=255)
    # What happened, as the webhook body carries it (JSON-ready, no model objects).
    data = models.JSONField(default=dict)
    # E-mail only: the rendered bodies, so that the task sends exactly what was decided.
    text_body = models.TextField(blank=True)
    html_body = models.TextField(blank=True)
    # Events that happen once per thing ("reservation X starts soon") carry a key: the
    # same key is never notified twice.
    dedupe_key = models.CharField(max_length=120, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "event", "channel", "dedupe_key"],
                condition=~models.Q(dedupe_key=""),
                name="notification_dedupe_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.user} ({self.channel}, {self.status})"


class WebhookEndpoint(models.Model):
    """A customer's URL that receives signed POSTs. The secret signs every delivery; it is
    shown once, at creation, and kept so that it can sign (never shown again).

    Its health is its own, not each delivery's: failures in a row push ``retry_after`` out
    for every delivery to it, and WEBHOOKS_CIRCUIT_FAILURES of them open its circuit (no
    more POSTs until its owner re-enables it). Only the services change these fields, each
    change with a ``WebhookEndpointEvent``."""

    class Circuit(models.TextChoices):
        CLOSED = "closed", _("Closed")
        OPEN = "open", _("Circuit open")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    # Empty: every event.
    events = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    is_active = models.BooleanField(default=True)
    secret = models.CharField(max_length=80, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    circuit = models.CharField(max_length=10, choices=Circuit.choices, default=Circuit.CLOSED)
    circuit_opened_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # No delivery to this endpoint is tried before this (its backoff after a failure).
    retry_after = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(circuit="closed", circuit_opened_at__isnull=True)
                | models.Q(circuit="open", circuit_opened_at__isnull=False),
                name="webhook_endpoint_circuit_opened_at",
            )
        ]

    def __str__(self) -> str:
        return self.url

    def wants(self, event: str) -> bool:
        return self.is_active and (not self.events or event in self.events)


class WebhookEndpointEvent(models.Model):
    """One change of an endpoint's state and why (append-only)."""

    class Kind(models.TextChoices):
        CREATED = "created", _("Created")
        CHANGED = "changed", _("Changed")
        CIRCUIT_OPENED = "circuit_opened", _("Circuit opened")
        REENABLED = "reenabled", _("Re-enabled")

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="event_log"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    at = models.DateTimeField(default=timezone.now)
    reason = models.CharField(max_length=500, blank=True)
    # Who did it; None: the platform (failures opened the circuit).
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["endpoint", "at", "pk"]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.kind} {self.at:%Y-%m-%d %H:%M:%S}"


class WebhookDelivery(models.Model):
    """One event's POST to one endpoint, tried until it is answered 2xx or runs out of tries.
    The body is kept byte for byte: a retry or a re-send posts the same body (same event id,
    so the receiver can drop duplicates) with a fresh timestamp and signature."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        DELIVERED = "delivered", _("Delivered")
        FAILED = "failed", _("Failed")
        # Not posted: the endpoint's circuit was open (``reason`` says so).
        SKIPPED = "skipped", _("Skipped")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.CharField(max_length=40)
    body = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    # When the next try is due (None: nothing more to try). A worker taking it moves this on
    # by a lease, so two workers never post the same try.
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.event} → {self.endpoint} ({self.status})"


class WebhookAttempt(models.Model):
    """One POST of a delivery and what came back (the log the customer sees)."""

    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveSmallIntegerField()
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    response_excerpt = models.CharField(max_length=500, blank=True)
    resend = models.BooleanField(default=False)

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"#{self.number} {self.status_code or self.error}"
