"""Volumes and their snapshots over the API, per account (a team's when acting for it).
Mount volumes at launch with ``"volumes": [{"volume": "<id or name>", "mount_path":
"/data"}]``; a snapshot restores into a new volume on any host."""

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
from gpurental.fleet.zones import UnknownZone, zone_named
from gpurental.rentals.models import Instance
from gpurental.teams.acting import account_of
from gpurental.volumes import snapshots
from gpurental.volumes.models import Snapshot, SnapshotStatus, Volume, VolumeStatus
from gpurental.volumes.selectors import host_for_volume
from gpurental.volumes.services import (
    VolumeRefused,
    is_uuid,
    volume_create,
    volume_delete,
    volume_detach,
    volume_resize,
)


def _host_of(data: dict):
    """The host a new volume goes to: the one named, or one picked in the zone named."""
    if "zone" in data:
        try:
            zone = zone_named(data["zone"])
        except UnknownZone as exc:
            raise ValidationError({"zone": [exc.message]}) from exc
        host = host_for_volume(zone)
        if host is None:
            raise ValidationError(
                {"zone": [_("zone %(zone)s has no active host now") % {"zone": zone.name}]}
            )
        return host
    host = host_named(data["host"])
    if host is None:
        raise ValidationError({"host": [_("there is no host %(host)s") % {"host": data["host"]}]})
    return host


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
            .select_related("host__zone", "instance")
        )

    @extend_schema(
        summary="Create a volume on a host, or in a zone",
        request=s.VolumeCreateSerializer,
        responses={201: s.VolumeSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.VolumeCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        host = _host_of(data)
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
        summary="Make a volume larger (never smaller); billed at the new size from now",
        request=s.VolumeResizeSerializer,
        responses={200: s.VolumeSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def resize(self, request, pk=None):
        form = s.VolumeResizeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            volume = volume_resize(
                volume=self.get_object(),
                size_gb=form.validated_data["size_gb"],
                actor=request.user,
            )
        except VolumeRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(s.VolumeSerializer(volume).data)

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


def _refused(exc: VolumeRefused) -> ValidationError:
    return ValidationError({exc.field or "non_field_errors": [exc.message]})


@extend_schema(tags=["volumes"])
class SnapshotViewSet(
    OwnedMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your volumes' snapshots, in the operator's object storage: each restores into a new
    volume on any host."""

    scope_area = "instances"
    model = Snapshot
    owner_field = "account"
    noun = gettext_lazy("snapshot")
    serializer_class = s.SnapshotSerializer

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .exclude(status=SnapshotStatus.DELETED)
            .select_related("volume", "instance")
        )

    @extend_schema(
        summary="Snapshot a volume (free, or its instance stopped), or a stopped instance's "
        "/workspace, into the object storage",
        request=s.SnapshotCreateSerializer,
        responses={201: s.SnapshotSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.SnapshotCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        account = account_of(request)
        try:
            if "instance" in data:
                instance = Instance.objects.filter(user=account, pk=data["instance"]).first()
                if instance is None:
                    raise ValidationError(
                        {"instance": [_("you have no instance %(id)s") % {"id": data["instance"]}]}
                    )
                snapshot = snapshots.workspace_snapshot_create(
                    instance=instance, name=data["name"], actor=request.user
                )
            else:
                ref = data["volume"]
                mine = Volume.objects.filter(account=account).exclude(status=VolumeStatus.DELETED)
                volume = (
                    mine.filter(pk=ref).first() if is_uuid(ref) else mine.filter(name=ref).first()
                )
                if volume is None:
                    raise ValidationError(
                        {"volume": [_("you have no volume %(ref)s") % {"ref": ref}]}
                    )
                snapshot = snapshots.snapshot_create(
                    volume=volume, name=data["name"], actor=request.user
                )
        except VolumeRefused as exc:
            raise _refused(exc) from exc
        return Response(s.SnapshotSerializer(snapshot).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Restore a ready snapshot into a new volume on a host, or in a zone",
        request=s.SnapshotRestoreSerializer,
        responses={201: s.VolumeSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def restore(self, request, pk=None):
        snapshot = self.get_object()
        form = s.SnapshotRestoreSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        host = _host_of(data)
        try:
            volume = snapshots.volume_restore(
                snapshot=snapshot,
                host=host,
                name=data["name"],
                size_gb=data.get("size_gb"),
                actor=request.user,
            )
        except VolumeRefused as exc:
            raise _refused(exc) from exc
        return Response(s.VolumeSerializer(volume).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Delete a snapshot from the object storage, for good",
        responses={204: OpenApiResponse(description="Deleted")},
    )
    def destroy(self, request, *args, **kwargs):
        try:
            snapshots.snapshot_delete(snapshot=self.get_object(), actor=request.user)
        except VolumeRefused as exc:
            raise _refused(exc) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)
