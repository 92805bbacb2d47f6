"""Notifications over the API: your webhook endpoints (the secret shown once, at creation),
their delivery log with re-send, your recent notifications, and your preferences. Another
customer's endpoint or delivery is a 404 worded as if it did not exist."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import UUID_RE, LookupMixin, OwnedMixin, PersonalMixin
from gpurental.api.notifications import serializers as s
from gpurental.notifications import services
from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import Notification, WebhookDelivery, WebhookEndpoint
from gpurental.notifications.webhooks import WebhookRefused
from gpurental.teams.acting import account_of


def _refused(exc: WebhookRefused) -> ValidationError:
    return ValidationError({exc.field: [exc.message]})


@extend_schema(tags=["notifications"])
class WebhookEndpointViewSet(
    OwnedMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your webhook endpoints: each event you keep on is POSTed to them, signed."""

    scope_area = "account"
    team_area = "webhooks"  # a team's endpoints: admins change them
    model = WebhookEndpoint
    noun = gettext_lazy("webhook endpoint")
    serializer_class = s.WebhookEndpointSerializer

    @extend_schema(
        summary="Register a webhook endpoint (the answer holds its secret, shown only once)",
        request=s.WebhookEndpointWriteSerializer,
        responses={201: s.WebhookEndpointCreatedSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.WebhookEndpointWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            endpoint = services.endpoint_create(
                user=account_of(request),
                url=data["url"],
                description=data.get("description", ""),
                events=data.get("events") or [],
            )
        except WebhookRefused as exc:
            raise _refused(exc) from exc
        if data.get("is_active") is False:
            services.endpoint_update(endpoint=endpoint, is_active=False)
        return Response(
            s.WebhookEndpointCreatedSerializer(endpoint).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(
        summary="Change a webhook endpoint (its secret stays)",
        request=s.WebhookEndpointWriteSerializer,
        responses={200: s.WebhookEndpointSerializer},
    )
    def partial_update(self, request, *args, **kwargs):
        endpoint = self.get_object()
        form = s.WebhookEndpointWriteSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        try:
            services.endpoint_update(endpoint=endpoint, **form.validated_data)
        except WebhookRefused as exc:
            raise _refused(exc) from exc
        return Response(s.WebhookEndpointSerializer(endpoint).data)

    @extend_schema(
        summary="Re-enable an endpoint whose circuit opened (its failures in a row are "
        "forgotten; new events are sent to it again)",
        request=None,
        responses={200: s.WebhookEndpointSerializer},
    )
    @action(detail=True, methods=["post"])
    def reenable(self, request, *args, **kwargs):
        endpoint = services.endpoint_reenable(endpoint=self.get_object(), by=request.user)
        return Response(s.WebhookEndpointSerializer(endpoint).data)

    @extend_schema(
        summary="Delete a webhook endpoint (nothing more is sent to it)",
        responses={204: OpenApiResponse(description="Deleted")},
    )
    def destroy(self, request, *args, **kwargs):
        services.endpoint_delete(endpoint=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["notifications"])
class WebhookDeliveryViewSet(
    LookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """The delivery log: each POST to your endpoints, every attempt and its answer."""

    scope_area = "account"
    team_area = "webhooks"
    noun = gettext_lazy("webhook delivery")
    serializer_class = s.WebhookDeliverySerializer
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return WebhookDelivery.objects.none()
        deliveries = WebhookDelivery.objects.filter(
            endpoint__user=account_of(self.request)
        ).prefetch_related("attempt_log")
        endpoint = self.request.query_params.get("endpoint")
        if endpoint and self.action == "list":
            deliveries = deliveries.filter(endpoint_id=endpoint)
        return deliveries

    @extend_schema(
        summary="List deliveries, newest first",
        parameters=[OpenApiParameter("endpoint", str, description="Only this endpoint's (its id)")],
    )
    def list(self, request, *args, **kwargs):
        endpoint = request.query_params.get("endpoint")
        if endpoint:
            try:
                exists = WebhookEndpoint.objects.filter(
                    pk=endpoint, user=account_of(request)
                ).exists()
            except Exception:  # not a UUID
                exists = False
            if not exists:
                # A bad filter value: a 400 naming the parameter (the list itself exists).
                raise ValidationError(
                    {
                        "endpoint": [
                            _("%(value)r is not one of your webhook endpoints' ids")
                            % {"value": endpoint}
                        ]
                    }
                )
        return super().list(request, *args, **kwargs)

    @extend_schema(
        summary="Send a delivery again now (same body and event id, a fresh signature)",
        request=None,
        responses={200: s.WebhookDeliverySerializer},
    )
    @action(detail=True, methods=["post"])
    def resend(self, request, *args, **kwargs):
        try:
            delivery = services.delivery_resend(delivery=self.get_object())
        except WebhookRefused as exc:
            raise _refused(exc) from exc
        delivery = self.get_queryset().get(pk=delivery.pk)
        return Response(s.WebhookDeliverySerializer(delivery).data)


@extend_schema(tags=["notifications"])
class NotificationViewSet(PersonalMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Notifications sent to you (e-mail and webhook), newest first."""

    scope_area = "account"
    model = Notification
    noun = gettext_lazy("notification")
    serializer_class = s.NotificationSerializer


@extend_schema(tags=["notifications"])
class NotificationPreferenceViewSet(viewsets.ViewSet):
    """Per event: e-mail on or off, webhook on or off (all on until you change them)."""

    scope_area = "account"
    team_area = None  # preferences are the person's own
    lookup_field = "event"
    lookup_value_regex = "[a-z_]+"

    def _one(self, user, event: str) -> dict:
        prefs = services.preferences_of(user=user)[event]
        return {"event": event, "label": EVENTS[event].label, **prefs}

    @extend_schema(
        summary="Your preferences, every event", responses=s.PreferenceSerializer(many=True)
    )
    def list(self, request):
        return Response([self._one(request.user, event) for event in EVENTS])

    def _event(self, event: str) -> str:
        if event not in EVENTS:
            raise NotFound(
                _("there is no event %(event)s; events are: %(events)s")
                % {"event": event, "events": ", ".join(EVENTS)}
            )
        return event

    @extend_schema(summary="One event's preference", responses=s.PreferenceSerializer)
    def retrieve(self, request, event=None):
        return Response(self._one(request.user, self._event(event)))

    @extend_schema(
        summary="Turn e-mail or webhook on or off for one event",
        request=s.PreferenceSerializer,
        responses=s.PreferenceSerializer,
    )
    def partial_update(self, request, event=None):
        event = self._event(event)
        form = s.PreferenceSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        services.preference_set(user=request.user, event=event, **form.validated_data)
        return Response(self._one(request.user, event))
