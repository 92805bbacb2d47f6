"""Shapes of teams, their members and invitations."""

from __future__ import annotations

from rest_framework import serializers

from gpurental.teams.models import Invitation, Membership, Role


class TeamSerializer(serializers.Serializer):
    slug = serializers.SlugField(read_only=True)
    name = serializers.CharField(read_only=True)
    role = serializers.CharField(read_only=True, help_text="Your role in the team")
    created_at = serializers.DateTimeField(read_only=True)


class TeamCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="The team's name, 1 to 100 characters")
    slug = serializers.CharField(
        max_length=50,
        required=False,
        allow_blank=True,
        default="",
        help_text="Its address (a-z, 0-9, '-'); default: made from the name",
    )


class MemberSerializer(serializers.ModelSerializer):
    email = serializers.EmailField(source="user.email", read_only=True)
    full_name = serializers.CharField(source="user.full_name", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "email", "full_name", "role", "joined_at"]
        read_only_fields = fields


class RoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices, help_text="owner, admin, member or viewer")


class InvitationSerializer(serializers.ModelSerializer):
    state = serializers.SerializerMethodField()

    class Meta:
        model = Invitation
        fields = ["id", "email", "role", "state", "created_at", "expires_at"]
        read_only_fields = fields

    def get_state(self, obj: Invitation) -> str:
        return obj.state()


class InviteSerializer(serializers.Serializer):
    email = serializers.EmailField(help_text="Who to invite; they accept logged in with it")
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)
