"""Shapes of your account: who you are, and your API keys."""

from __future__ import annotations

from decimal import ROUND_HALF_UP

from rest_framework import serializers

from gpurental.accounts.models import ApiKey, ApiKeyScope
from gpurental.api.fields import CurrencyField, money_field
from gpurental.api.sshkeys.serializers import SSHKeySerializer


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "expires_at",
            "created_at",
            "last_used_at",
            "revoked_at",
            "team",
        ]
        read_only_fields = fields

    team = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="The team whose account the key acts as (null: your own)",
    )


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=100, required=False, allow_blank=True, default="", help_text="What it is for"
    )
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=ApiKeyScope.choices),
        required=False,
        allow_empty=False,
        help_text="What the key may do; default every customer scope (read, instances, "
        "reservations, billing). staff: staff only. A key creating a key gives at most its own.",
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Refused from then on"
    )
    team = serializers.CharField(
        max_length=50,
        required=False,
        allow_null=True,
        default=None,
        help_text="A team's slug: the key acts as that team's account, with your role there",
    )


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The key itself, shown once: store it now. Null in a replayed answer.",
    )

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class MeSerializer(serializers.Serializer):
    email = serializers.EmailField(read_only=True)
    full_name = serializers.CharField(read_only=True)
    balance = serializers.DecimalField(
        max_digits=16, decimal_places=2, rounding=ROUND_HALF_UP, read_only=True
    )
    currency = CurrencyField()
    gpu_quota = serializers.IntegerField(read_only=True, help_text="GPUs you may hold at once")
    gpus_in_use = serializers.IntegerField(read_only=True)
    credit_limit = serializers.DecimalField(max_digits=12, decimal_places=2, read_only=True)
    hourly_burn = money_field(help_text="What your running on-demand instances cost per hour")
    hours_left = serializers.DecimalField(
        max_digits=16,
        decimal_places=1,
        rounding=ROUND_HALF_UP,
        read_only=True,
        allow_null=True,
        help_text="Hours balance and credit last at hourly_burn; null when nothing runs",
    )
    low_balance = serializers.BooleanField(
        read_only=True,
        help_text="Nothing left to spend, or less than BILLING_LOW_BALANCE_HOURS at this burn",
    )
    is_staff = serializers.BooleanField(read_only=True)
    team = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The team whose account this key acts as (its slug); null: your own. "
        "Balance, quota and GPUs in use are then the team's",
    )
    team_role = serializers.CharField(
        read_only=True, allow_null=True, help_text="Your role in that team; null: your own"
    )


class LogoutEverywhereSerializer(serializers.Serializer):
    keep_api_keys = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        default=list,
        help_text="Ids of your active API keys that stay valid; every other key is revoked "
        "(default: none kept, the key making this request included)",
    )
    keep_ssh_keys = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        default=list,
        help_text="Ids of your SSH keys that stay; every other one is removed (default: none kept)",
    )


class LoggedOutEverywhereSerializer(serializers.Serializer):
    at = serializers.DateTimeField(read_only=True)
    api_keys_revoked = ApiKeySerializer(many=True, read_only=True)
    api_keys_kept = ApiKeySerializer(many=True, read_only=True)
    ssh_keys_removed = SSHKeySerializer(many=True, read_only=True)
    ssh_keys_kept = SSHKeySerializer(many=True, read_only=True)
    also = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="What else was ended (e.g. webhook endpoints turned off until you turn "
        "them on again)",
    )
