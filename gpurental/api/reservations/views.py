"""Reservations over the API: quote, book, read, cancel, launch again; and the free GPUs
per hour ahead.

Visibility as for instances: customers see their own reservations, staff see all, and
anything else is a 404 worded as if it did not exist.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Prefetch
from django.utils import timezone
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.instances.serializers import InstanceDetailSerializer
from gpurental.api.instances.views import instances_for
from gpurental.api.lookups import UUID_RE, LookupMixin
from gpurental.api.reservations import serializers as s
from gpurental.billing.pricing import RESERVED
from gpurental.catalog.models import GPUModel
from gpurental.rentals import selectors as rental_selectors
from gpurental.rentals.models import Allocation, Instance, Reservation
from gpurental.rentals.services.reservations import (
    reservation_book,
    reservation_cancel,
    reservation_quote,
    reservation_relaunch,
)
from gpurental.teams.acting import account_of


@extend_schema(tags=["reservations"])
class ReservationViewSet(
    LookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """GPUs booked ahead for a period, paid at booking at the plan's reserved rate."""

    scope_area = "reservations"

    noun = gettext_lazy("reservation")
    serializer_class = s.ReservationSerializer
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Reservation.objects.none()
        return rental_selectors.reservations_visible_to(
            user=account_of(self.request)
        ).prefetch_related(
            Prefetch(
                "allocations",
                queryset=Allocation.objects.select_related("gpu__host"),
                to_attr="held",
            ),
            Prefetch(
                "instances",
                queryset=Instance.objects.order_by("-created_at").only("pk", "reservation_id"),
                to_attr="launched",
            ),
            "events",
        )

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}

    def _detail(self, reservation: Reservation, status_code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=reservation.pk)
        return Response(
            s.ReservationSerializer(fresh, context=self.get_serializer_context()).data,
            status=status_code,
        )

    @extend_schema(
        summary="Book GPUs for a period; the price is paid now",
        request=s.ReservationCreateSerializer,
        responses={201: s.ReservationSerializer},
        parameters=[IDEMPOTENCY_KEY],
        examples=[
            OpenApiExample(
                "By GPU model",
                value={
                    "gpu_model": "A10G",
                    "gpu_count": 2,
                    "image": "pytorch-2.1",
                    "start": "2026-12-03T10:00:00Z",
                    "end": "2026-12-03T18:00:00Z",
                },
                request_only=True,
            ),
        ],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.ReservationCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        reservation = reservation_book(
            user=account_of(request),
            image=data["image"],
            start=data["start"],
            end=data["end"],
            **form.plan_kwargs(),
        )
        return self._detail(reservation, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Cancel before the start: the GPUs are freed, refund_if_cancelled_now paid back",
        request=None,
        responses={200: s.ReservationSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request, pk=None):
        reservation = reservation_cancel(reservation=self.get_object(), actor=request.user)
        return self._detail(reservation)

    @extend_schema(
        summary="Launch a new instance on the reserved GPUs after its instance was terminated",
        description="Only while the reservation is active and before its end, and only once "
        "every earlier instance of it is terminated (a stopped one is started instead). The "
        "new instance starts with an empty /workspace; nothing more is charged.",
        request=None,
        responses={201: InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def relaunch(self, request, pk=None):
        instance = reservation_relaunch(reservation=self.get_object(), actor=request.user)
        fresh = instances_for(account_of(request)).get(pk=instance.pk)
        return Response(
            InstanceDetailSerializer(fresh, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        summary="Price a booking without making it",
        parameters=[s.ReservationQuoteSerializer],
        responses={200: s.ReservationQuoteResultSerializer},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def quote(self, request):
        form = s.ReservationQuoteSerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        now = timezone.now()
        # The booking's own checks and pricing, so a quote that passes books the same.
        priced = reservation_quote(
            start=form.validated_data["start"],
            end=form.validated_data["end"],
            now=now,
            **form.plan_kwargs(),
        )
        plan, start, end, hours = priced.plan, priced.start, priced.end, priced.hours
        quote = {
            "plan": plan.slug,
            "gpu_model": plan.gpu_model.slug,
            "gpu_count": plan.gpu_count,
            "start": start,
            "end": end,
            "hours": hours,
            "gpu_hours": hours * plan.gpu_count,
            "rate_kind": RESERVED,
            "hourly_rate": plan.reserved_rate,
            "discount": plan.reserved_discount,
            "price": priced.price,
            "full_refund_until": start - timedelta(hours=settings.RESERVATION_FULL_REFUND_HOURS),
            "late_refund_percent": settings.RESERVATION_LATE_REFUND_PERCENT,
        }
        return Response(s.ReservationQuoteResultSerializer(quote).data)


@extend_schema(tags=["reservations"])
class AvailabilityView(GenericAPIView):
    """Free GPUs per hour ahead, per GPU model: where a booking fits (``largest_block``)."""

    serializer_class = s.AvailabilitySerializer
    pagination_class = None

    @extend_schema(parameters=[s.AvailabilityQuerySerializer])
    def get(self, request, *args, **kwargs):
        now = timezone.now()
        query = s.AvailabilityQuerySerializer(data=request.query_params, context={"now": now})
        query.is_valid(raise_exception=True)
        data = query.validated_data
        start = data.get("start") or now.replace(minute=0, second=0, microsecond=0)
        hours = data.get("hours") or settings.RESERVATION_HORIZON_DAYS * 24
        if "gpu_model" in data:
            models = [data["gpu_model"]]
        else:
            models = (
                GPUModel.objects.filter(plans__is_active=True)
                .distinct()
                .order_by("memory_gb", "name")
            )
        rows = []
        for model in models:
            total, slots = rental_selectors.availability(gpu_model=model, start=start, hours=hours)
            rows.append(
                {
                    "gpu_model": model.slug,
                    "name": model.name,
                    "short_name": model.short_name,
                    "total": total,
                    "hours": slots,
                }
            )
        body = {"start": start, "hours": hours, "models": rows}
        return Response(s.AvailabilitySerializer(body).data)
