"""Notifications over the API: webhook endpoints, their delivery log, preferences."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import (
    Notification,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)

EVENT_HELP = "Event names: " + ", ".join(EVENTS)


class WebhookEndpointSerializer(serializers.ModelSerializer):
    circuit = serializers.CharField(
        read_only=True,
        help_text="closed, or open: after WEBHOOKS_CIRCUIT_FAILURES failures in a row nothing "
        "is sent to it (deliveries are skipped) until you re-enable it (POST …/reenable/)",
    )

    class Meta:
        model = WebhookEndpoint
        fields = [
            "id",
            "url",
            "description",
            "events",
            "is_active",
            "created_at",
            "circuit",
            "circuit_opened_at",
            "consecutive_failures",
            "retry_after",
        ]
        read_only_fields = fields


class WebhookEndpointCreatedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(
        read_only=True,
        help_text="Signs every delivery (X-Gpurental-Signature). Shown only now: keep it.",
    )

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookEndpointWriteSerializer(serializers.Serializer):
    url = serializers.CharField(
        max_length=2000,
        help_text="https:// (or http://) URL on a public address; private, loopback and "
        "link-local addresses are refused",
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    events = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        help_text=f"Empty or absent: every event. {EVENT_HELP}",
    )
    is_active = serializers.BooleanField(required=False)


class WebhookAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookAttempt
        fields = ["number", "at", "status_code", "ok", "error", "duration_ms", "response_excerpt"]
        read_only_fields = fields


class WebhookDeliverySerializer(serializers.ModelSerializer):
    # Plain strings: another "status" enum in the schema would collide with the others.
    status = serializers.CharField(
        read_only=True, help_text="pending, delivered, failed, or skipped (see reason)"
    )
    endpoint = serializers.UUIDField(source="endpoint_id", read_only=True)
    attempt_log = WebhookAttemptSerializer(many=True, read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "endpoint",
            "event",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "created_at",
            "delivered_at",
            "reason",
            "body",
            "attempt_log",
        ]
        read_only_fields = fields


class NotificationSerializer(serializers.ModelSerializer):
    status = serializers.CharField(read_only=True, help_text="pending, sent or failed")

    class Meta:
        model = Notification
        fields = ["id", "event", "channel", "status", "subject", "data", "created_at", "sent_at"]
        read_only_fields = fields


class PreferenceSerializer(serializers.Serializer):
    event = serializers.CharField(read_only=True)
    label = serializers.CharField(read_only=True)
    email = serializers.BooleanField(required=False)
    webhook = serializers.BooleanField(required=False)
