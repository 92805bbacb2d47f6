"""Volumes over the API: a customer's data apart from any one instance."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.api.fields import CurrencyField, StorageMonthlyField
from gpurental.storage.models import StoredKind
from gpurental.volumes.models import Volume


class VolumeSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    instance = serializers.UUIDField(
        source="instance_id", read_only=True, help_text="The instance it was last mounted in"
    )
    in_use = serializers.SerializerMethodField(
        help_text="Whether that instance has not ended: then it cannot go to another"
    )
    monthly_cost = StorageMonthlyField(StoredKind.VOLUME, lambda volume: volume.size_gb)
    currency = CurrencyField()

    class Meta:
        model = Volume
        fields = [
            "id",
            "name",
            "host",
            "size_gb",
            "used_bytes",
            "measured_at",
            "status",
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


class VolumeCreateSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=63, help_text="Lowercase letters, digits, '.', '_', '-'"
    )
    size_gb = serializers.IntegerField(min_value=1, max_value=16384)
    host = serializers.CharField(
        max_length=64,
        help_text="The host it lives on (an instance's `host`); instances that mount it run there",
    )


class VolumeMountSerializer(serializers.Serializer):
    volume = serializers.CharField(max_length=64, help_text="The volume's id or name")
    mount_path = serializers.CharField(max_length=200, required=False, default="/data")
