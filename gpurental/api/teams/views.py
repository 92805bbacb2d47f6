"""Teams over the API: yours, their members (role changes, removal) and invitations.

Only members see a team: anyone else (staff included) gets the same 404 as for a team
that does not exist. What a member may change is their role's (``teams.roles``); the
services check it and the refusal names the role needed (403).
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response

from gpurental.accounts.models import ApiKey
from gpurental.api.lookups import UUID_RE
from gpurental.api.teams import serializers as s
from gpurental.teams import services
from gpurental.teams.models import Invitation, Membership, Team
from gpurental.teams.selectors import role_in


def _refused(exc: Exception) -> Exception:
    if isinstance(exc, services.RoleTooLow):
        return PermissionDenied(exc.message)
    return ValidationError({exc.field: [exc.message]})


@extend_schema(tags=["teams"])
class TeamViewSet(viewsets.GenericViewSet):
    """Teams you belong to. A team has one balance, quota and set of rentals; members act
    on them by role: viewer reads; member launches and books; admin pays and invites;
    owner changes any role."""

    scope_area = "teams"  # changes need a key with every customer scope (KeyScopes)
    team_area = None  # the services check the caller's role in the team named in the URL
    team_key_ok = True  # a key made for a team sees that team only (_key_team)
    lookup_field = "slug"
    lookup_value_regex = r"[-a-z0-9_]+"
    serializer_class = s.TeamSerializer
    pagination_class = None

    def _key_team_id(self):
        """The team a team's key is bound to (None: a personal key or the console)."""
        key = self.request.auth
        return key.team_id if isinstance(key, ApiKey) else None

    def _team(self, slug: str) -> tuple[Team, str]:
        team = Team.objects.select_related("account").filter(slug=slug).first()
        if team is not None and self._key_team_id() not in (None, team.pk):
            team = None  # a key made for another team: as if this one did not exist
        role = role_in(user=self.request.user, account=team.account) if team else None
        if role is None:
            raise NotFound(_("there is no team %(slug)s") % {"slug": slug})
        return team, role

    @extend_schema(responses={200: s.TeamSerializer(many=True)})
    def list(self, request, *args, **kwargs):
        rows = Membership.objects.filter(user=request.user).select_related("team")
        if self._key_team_id() is not None:
            rows = rows.filter(team_id=self._key_team_id())
        body = [
            {
                "slug": m.team.slug,
                "name": m.team.name,
                "role": m.role,
                "created_at": m.team.created_at,
            }
            for m in rows.order_by("team__name")
        ]
        return Response(s.TeamSerializer(body, many=True).data)

    @extend_schema(request=s.TeamCreateSerializer, responses={201: s.TeamSerializer})
    def create(self, request, *args, **kwargs):
        if self._key_team_id() is not None:
            raise PermissionDenied(
                _("this API key acts for one team; create teams with a key of your own account")
            )
        form = s.TeamCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            team = services.team_create(creator=request.user, **form.validated_data)
        except services.TeamRefused as exc:
            raise _refused(exc) from exc
        body = {
            "slug": team.slug,
            "name": team.name,
            "role": "owner",
            "created_at": team.created_at,
        }
        return Response(s.TeamSerializer(body).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request, slug=None):
        team, role = self._team(slug)
        body = {"slug": team.slug, "name": team.name, "role": role, "created_at": team.created_at}
        return Response(s.TeamSerializer(body).data)

    @extend_schema(responses={200: s.MemberSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def members(self, request, slug=None):
        team, _role = self._team(slug)
        rows = team.memberships.select_related("user").order_by("user__email")
        return Response(s.MemberSerializer(rows, many=True).data)

    def _membership(self, team: Team, member: str) -> Membership:
        row = team.memberships.select_related("user", "team").filter(pk=member).first()
        if row is None:
            raise NotFound(_("there is no member %(member)s in this team") % {"member": member})
        return row

    @extend_schema(
        request=s.RoleSerializer,
        responses={200: s.MemberSerializer, 204: OpenApiResponse(description="Removed")},
    )
    @action(detail=True, methods=["patch", "delete"], url_path=r"members/(?P<member>[0-9]{1,18})")
    def member(self, request, slug=None, member=None):
        """PATCH {"role": …} changes a member's role; DELETE removes them."""
        team, _role = self._team(slug)
        row = self._membership(team, member)
        try:
            if request.method == "DELETE":
                services.member_remove(membership=row, actor=request.user)
                return Response(status=status.HTTP_204_NO_CONTENT)
            form = s.RoleSerializer(data=request.data)
            form.is_valid(raise_exception=True)
            row = services.role_change(
                membership=row, role=form.validated_data["role"], actor=request.user
            )
        except (services.TeamRefused, services.RoleTooLow) as exc:
            raise _refused(exc) from exc
        return Response(s.MemberSerializer(row).data)

    @extend_schema(request=None, responses={204: OpenApiResponse(description="Left")})
    @action(detail=True, methods=["post"])
    def leave(self, request, slug=None):
        team, _role = self._team(slug)
        try:
            services.leave(membership=team.memberships.get(user=request.user))
        except services.TeamRefused as exc:
            raise _refused(exc) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=s.InviteSerializer,
        responses={200: s.InvitationSerializer(many=True), 201: s.InvitationSerializer},
    )
    @action(detail=True, methods=["get", "post"])
    def invitations(self, request, slug=None):
        """GET lists the team's invitations; POST invites someone by e-mail (admins invite
        members and viewers; owners any role)."""
        team, _role = self._team(slug)
        if request.method == "GET":
            return Response(s.InvitationSerializer(team.invitations.all(), many=True).data)
        form = s.InviteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            invitation, _raw = services.invite(team=team, actor=request.user, **form.validated_data)
        except (services.TeamRefused, services.RoleTooLow) as exc:
            raise _refused(exc) from exc
        return Response(s.InvitationSerializer(invitation).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: s.InvitationSerializer})
    @action(
        detail=True,
        methods=["delete"],
        url_path=rf"invitations/(?P<invitation>{UUID_RE})",
    )
    def invitation(self, request, slug=None, invitation=None):
        """Withdraw an invitation not yet accepted."""
        team, _role = self._team(slug)
        row = Invitation.objects.filter(team=team, pk=invitation).first()
        if row is None:
            raise NotFound(
                _("there is no invitation %(invitation)s in this team") % {"invitation": invitation}
            )
        try:
            row = services.invitation_revoke(invitation=row, actor=request.user, now=timezone.now())
        except (services.TeamRefused, services.RoleTooLow) as exc:
            raise _refused(exc) from exc
        return Response(s.InvitationSerializer(row).data)
