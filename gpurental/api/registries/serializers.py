"""Registry logins over the API: the password goes in, and never comes out again."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.images.models import RegistryCredential


class RegistryLoginSerializer(serializers.ModelSerializer):
    class Meta:
        model = RegistryCredential
        fields = ["id", "registry", "username", "created_at", "updated_at"]
        read_only_fields = fields


class RegistryLoginSaveSerializer(serializers.Serializer):
    registry = serializers.CharField(
        max_length=255, help_text="host[:port] of the registry, e.g. ghcr.io or 10.0.0.5:5000"
    )
    username = serializers.CharField(max_length=255, trim_whitespace=False)
    password = serializers.CharField(
        max_length=4096,
        trim_whitespace=False,
        write_only=True,
        style={"input_type": "password"},
        help_text="The password or access token; stored encrypted, never shown again",
    )
