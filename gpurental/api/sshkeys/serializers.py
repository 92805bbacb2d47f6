"""SSH keys over the API: the public keys the SSH gateway lets into your instances."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.accounts.models import SSHKey


class SSHKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = SSHKey
        fields = [
            "id",
            "name",
            "algorithm",
            "fingerprint",
            "public_key",
            "created_at",
            "last_used_at",
        ]
        read_only_fields = fields


class SSHKeyCreateSerializer(serializers.Serializer):
    public_key = serializers.CharField(
        max_length=16_384,
        trim_whitespace=True,
        help_text="One OpenSSH public key line, e.g. the contents of ~/.ssh/id_ed25519.pub "
        "(ssh-ed25519, ecdsa-sha2-*, sk-*, or ssh-rsa of at least 2048 bits)",
    )
    name = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        default="",
        help_text="What it is; default the key's comment",
    )
