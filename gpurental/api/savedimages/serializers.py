"""Saved images over the API: an instance's container kept as a private image."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.api.fields import CurrencyField, StorageMonthlyField
from gpurental.images.models import SavedImage, SavedImageEvent
from gpurental.storage.models import StoredKind
from gpurental.storage.services import gb_of


class SavedImageEventSerializer(serializers.ModelSerializer):
    at = serializers.DateTimeField(source="created_at", read_only=True)
    percent = serializers.SerializerMethodField(help_text="The push's progress, when known")

    class Meta:
        model = SavedImageEvent
        fields = ["at", "from_status", "to_status", "reason", "percent"]

    def get_percent(self, obj) -> float | None:
        return (obj.data or {}).get("percent")


class SavedImageSerializer(serializers.ModelSerializer):
    template = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    source_instance = serializers.UUIDField(source="source_instance_id", read_only=True)
    monthly_cost = StorageMonthlyField(
        StoredKind.SAVED_IMAGE, lambda image: gb_of(image.size_bytes)
    )
    currency = CurrencyField()

    class Meta:
        model = SavedImage
        fields = [
            "id",
            "name",
            "reference",
            "status",
            "status_reason",
            "size_bytes",
            "template",
            "source_instance",
            "created_at",
            "ready_at",
            "monthly_cost",
            "currency",
        ]
        read_only_fields = fields


class SavedImageDetailSerializer(SavedImageSerializer):
    events = SavedImageEventSerializer(many=True, read_only=True)

    class Meta(SavedImageSerializer.Meta):
        fields = [*SavedImageSerializer.Meta.fields, "events"]
        read_only_fields = fields


class SaveImageSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=63,
        help_text="1 to 63 lowercase letters, digits, '.', '_' or '-'; unique among your "
        "saved images",
    )
