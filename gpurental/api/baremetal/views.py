"""Dedicated hosts over the API: the plans, and one's own leases (book, read, launch
into, end, cancel). Another customer's lease is a 404 worded as if it did not exist."""

from __future__ import annotations

from django.db.models import Sum
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from gpurental.api.baremetal import serializers as s
from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.instances.serializers import InstanceDetailSerializer
from gpurental.api.instances.views import instances_for
from gpurental.api.lookups import UUID_RE, LookupMixin
from gpurental.baremetal import selectors, services
from gpurental.baremetal.models import DedicatedPlan, Lease
from gpurental.teams.acting import account_of


@extend_schema(tags=["dedicated hosts"])
class DedicatedPlanViewSet(
    LookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Whole hosts offered for lease, priced per hour for the host."""

    noun = gettext_lazy("dedicated plan")
    serializer_class = s.DedicatedPlanSerializer
    lookup_field = "slug"
    pagination_class = None

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return DedicatedPlan.objects.none()
        return selectors.plans_offered()


@extend_schema(tags=["dedicated hosts"])
class LeaseViewSet(
    LookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """A whole host, one tenant, over [start, end), billed per second."""

    # A lease is a booking of capacity: API keys need the reservations scope to change one.
    scope_area = "reservations"
    team_area = "leases"
    noun = gettext_lazy("lease")
    serializer_class = s.LeaseSerializer
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Lease.objects.none()
        return (
            selectors.leases_visible_to(user=account_of(self.request))
            .annotate(charged_so_far=Sum("charges__amount", default=0))
            .prefetch_related("events")
        )

    def _detail(self, lease: Lease, code=status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=lease.pk)
        return Response(s.LeaseSerializer(fresh).data, status=code)

    @extend_schema(
        summary="Lease a whole host (start omitted: now)",
        request=s.LeaseCreateSerializer,
        responses={201: s.LeaseSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.LeaseCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        lease = services.lease_book(user=account_of(request), **form.validated_data)
        return self._detail(lease, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Launch an instance on every GPU of the leased host",
        request=s.LeaseLaunchSerializer,
        responses={201: InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def launch(self, request, pk=None):
        lease = self.get_object()
        form = s.LeaseLaunchSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        instance = services.lease_launch(
            lease=lease, image=form.validated_data["image"], actor=request.user
        )
        fresh = instances_for(account_of(request)).get(pk=instance.pk)
        return Response(InstanceDetailSerializer(fresh).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="End a lease that started at booking now; billing stops",
        request=None,
        responses={200: s.LeaseSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def end(self, request, pk=None):
        lease = self.get_object()
        services.lease_end(lease=lease, actor=request.user)
        return self._detail(lease)

    @extend_schema(
        summary="Cancel a booked lease before its start",
        request=None,
        responses={200: s.LeaseSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request, pk=None):
        lease = services.lease_cancel(lease=self.get_object(), actor=request.user)
        return self._detail(lease)
