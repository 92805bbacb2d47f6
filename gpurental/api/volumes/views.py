"""Volumes over the API, per account (a team's when acting for it). Mount them at launch
with ``"volumes": [{"volume": "<id or name>", "mount_path": "/data"}]``."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import OwnedMixin
from gpurental.api.volumes import serializers as s
from gpurental.fleet.selectors import host_named
from gpurental.teams.acting import account_of
from gpurental.volumes.models import Volume, VolumeStatus
from gpurental.volumes.services import (
    VolumeRefused,
    volume_create,
    volume_delete,
    volume_detach,
)


@extend_schema(tags=["volumes"])
class VolumeViewSet(
    OwnedMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your volumes: each lives on one host and outlives the instances that mount it."""

    scope_area = "instances"
    model = Volume
    owner_field = "account"
    noun = gettext_lazy("volume")
    serializer_class = s.VolumeSerializer

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .exclude(status=VolumeStatus.DELETED)
            .select_related("host", "instance")
        )

    @extend_schema(
        summary="Create a volume on a host",
        request=s.VolumeCreateSerializer,
        responses={201: s.VolumeSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.VolumeCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        host = host_named(data["host"])
        if host is None:
            raise ValidationError(
                {"host": [_("there is no host %(host)s") % {"host": data["host"]}]}
            )
        try:
            volume = volume_create(
                account=account_of(request),
                name=data["name"],
                size_gb=data["size_gb"],
                host=host,
                actor=request.user,
            )
        except VolumeRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(s.VolumeSerializer(volume).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Delete a volume and its data, for good (not while an instance holds it)",
        responses={204: OpenApiResponse(description="Deleted")},
    )
    def destroy(self, request, *args, **kwargs):
        try:
            volume_delete(volume=self.get_object(), actor=request.user)
        except VolumeRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Take a volume from the stopped instance that holds it (the next launch on "
        "its host may mount it; that instance starts again without it)",
        request=None,
        responses={200: s.VolumeSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def detach(self, request, pk=None):
        try:
            volume = volume_detach(volume=self.get_object(), actor=request.user)
        except VolumeRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(s.VolumeSerializer(volume).data)
