"""Volumes over the API: a customer's data apart from any one instance."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import serializers

from gpurental.api.fields import CurrencyField, StorageMonthlyField, zone_of_host_field
from gpurental.storage.models import StoredKind
from gpurental.storage.services import gb_of
from gpurental.volumes.models import Snapshot, Volume


class VolumeSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    zone = zone_of_host_field("Its host's zone (null: none): instances that mount it run there")
    instance = serializers.UUIDField(
        source="instance_id", read_only=True, help_text="The instance it was last mounted in"
    )
    in_use = serializers.SerializerMethodField(
        help_text="Whether that instance has not ended: then it cannot go to another"
    )
    monthly_cost = StorageMonthlyField(StoredKind.VOLUME, lambda volume: volume.size_gb)
    currency = CurrencyField()
    restored_from = serializers.UUIDField(
        source="restored_from_id",
        read_only=True,
        allow_null=True,
        help_text="The snapshot it was restored from (status restoring until its host has "
        "unpacked it), or null",
    )

    class Meta:
        model = Volume
        fields = [
            "id",
            "name",
            "host",
            "zone",
            "size_gb",
            "used_bytes",
            "measured_at",
            "status",
            "status_reason",
            "restored_from",
            "instance",
            "mount_path",
            "in_use",
            "created_at",
            "monthly_cost",
            "currency",
        ]
        read_only_fields = fields

    def get_in_use(self, obj) -> bool:
        from gpurental.volumes.services import in_use

        return in_use(obj)


class WhereSerializer(serializers.Serializer):
    """Where a new volume lives: a host, or a zone (the platform picks a host in it)."""

    host = serializers.CharField(
        max_length=64,
        required=False,
        help_text="The host it lives on (an instance's `host`); instances that mount it run "
        "there. Give this or zone",
    )
    zone = serializers.CharField(
        max_length=63,
        required=False,
        help_text="Or a zone (catalog's `zones`): it lives on an active host there",
    )

    def validate(self, data):
        if ("host" in data) == ("zone" in data):
            raise serializers.ValidationError(
                {"host": [_("name a host or a zone, not both nor neither")]}
            )
        return data


class VolumeCreateSerializer(WhereSerializer):
    name = serializers.CharField(
        max_length=63, help_text="Lowercase letters, digits, '.', '_', '-'"
    )
    size_gb = serializers.IntegerField(min_value=1, max_value=16384)


class VolumeResizeSerializer(serializers.Serializer):
    size_gb = serializers.IntegerField(
        min_value=1, max_value=16384, help_text="Larger than now: a volume never shrinks"
    )


class VolumeMountSerializer(serializers.Serializer):
    volume = serializers.CharField(max_length=64, help_text="The volume's id or name")
    mount_path = serializers.CharField(max_length=200, required=False, default="/data")


class SnapshotSerializer(serializers.ModelSerializer):
    volume = serializers.UUIDField(
        source="volume_id", read_only=True, allow_null=True, help_text="The snapshotted volume"
    )
    instance = serializers.UUIDField(
        source="instance_id",
        read_only=True,
        allow_null=True,
        help_text="Or the instance whose /workspace it holds (launch with workspace_from)",
    )
    source_name = serializers.CharField(read_only=True, help_text="What it is a snapshot of")
    monthly_cost = StorageMonthlyField(
        StoredKind.SNAPSHOT, lambda snapshot: gb_of(snapshot.size_bytes)
    )
    currency = CurrencyField()

    class Meta:
        model = Snapshot
        fields = [
            "id",
            "name",
            "volume",
            "instance",
            "source_name",
            "status",
            "status_reason",
            "size_bytes",
            "sha256",
            "created_at",
            "ready_at",
            "monthly_cost",
            "currency",
        ]
        read_only_fields = fields


class SnapshotCreateSerializer(serializers.Serializer):
    volume = serializers.CharField(
        max_length=64, required=False, help_text="The volume's id or name (or instance)"
    )
    instance = serializers.UUIDField(
        required=False, help_text="Or a stopped instance, for its /workspace"
    )
    name = serializers.CharField(
        max_length=63, help_text="Lowercase letters, digits, '.', '_', '-'"
    )

    def validate(self, data):
        if ("volume" in data) == ("instance" in data):
            raise serializers.ValidationError(
                {"volume": [_("name a volume or an instance, not both nor neither")]}
            )
        return data


class SnapshotRestoreSerializer(WhereSerializer):
    name = serializers.CharField(max_length=63, help_text="The new volume's name")
    size_gb = serializers.IntegerField(
        min_value=1,
        max_value=16384,
        required=False,
        help_text="Default: the snapshotted volume's size",
    )
