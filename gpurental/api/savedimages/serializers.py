"""Saved images over the API: an instance's container kept as a private image."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.images.models import SavedImage, SavedImageEvent


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
