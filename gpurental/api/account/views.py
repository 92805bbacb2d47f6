"""Your account over the API: who you are (balance, quota, GPUs in use), your API keys,
and "log out everywhere".

API keys stay private to their owner, even for staff: they are credentials, and the
back-office revokes them. Another's key is a 404, as if it did not exist."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from gpurental.accounts.credentials import Reason, account_credentials_revoke
from gpurental.accounts.models import ApiKey
from gpurental.accounts.services import ApiKeyRefused, api_key_create, api_key_revoke
from gpurental.addresses import client_ip
from gpurental.api.account import serializers as s
from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import PersonalMixin
from gpurental.billing.selectors import balance_status
from gpurental.rentals import selectors as rental_selectors
from gpurental.teams.acting import account_of, role_of
from gpurental.teams.models import Team


def _forget_secret(body: dict) -> dict:
    # The raw key is shown once and never stored, not even for an idempotent replay.
    return {**body, "key": None}


@extend_schema(tags=["account"])
class ApiKeyViewSet(
    PersonalMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your API keys. The key itself is shown once, when it is created."""

    scope_area = "account"
    team_key_ok = True  # a team's key sees and makes keys for that team only
    model = ApiKey
    noun = gettext_lazy("API key")
    serializer_class = s.ApiKeySerializer

    def get_queryset(self):
        keys = super().get_queryset()
        creator = self.request.auth
        if isinstance(creator, ApiKey) and creator.team_id is not None:
            keys = keys.filter(team_id=creator.team_id)
        return keys

    @extend_schema(
        summary="Create an API key (the response is the only time the key is shown)",
        request=s.ApiKeyCreateSerializer,
        responses={201: s.ApiKeyCreatedSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent(redact=_forget_secret)
    def create(self, request, *args, **kwargs):
        form = s.ApiKeyCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        scopes = data.get("scopes")
        creator = request.auth if isinstance(request.auth, ApiKey) else None
        if creator is not None:
            scopes = creator.scopes if scopes is None else scopes
            beyond = sorted(set(scopes) - set(creator.scopes))
            if beyond:
                raise ValidationError(
                    {
                        "scopes": [
                            _("this key has no %(scopes)s scope to give")
                            % {"scopes": ", ".join(beyond)}
                        ]
                    }
                )
        team = None
        if creator is not None and creator.team_id is not None:
            # A key made for a team (a CI's, say) makes keys for that team and no other
            # account: not its holder's own, not another team of theirs.
            if data.get("team") != creator.team.slug:
                raise ValidationError(
                    {
                        "team": [
                            _(
                                "this key acts for the team %(team)s: it makes keys for it "
                                'only (send "team": "%(team)s")'
                            )
                            % {"team": creator.team.slug}
                        ]
                    }
                )
            team = creator.team
        elif data.get("team"):
            team = Team.objects.filter(slug=data["team"], memberships__user=request.user).first()
            if team is None:
                raise ValidationError(
                    {
                        "team": [
                            _("you are not a member of a team %(team)r") % {"team": data["team"]}
                        ]
                    }
                )
        try:
            key, raw = api_key_create(
                user=request.user,
                name=data["name"],
                scopes=scopes,
                expires_at=data["expires_at"],
                team=team,
            )
        except ApiKeyRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        key.key = raw
        return Response(s.ApiKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Revoke an API key (it stays listed, with revoked_at)",
        responses={204: OpenApiResponse(description="Revoked")},
    )
    def destroy(self, request, *args, **kwargs):
        api_key_revoke(key=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["account"])
class MeView(GenericAPIView):
    """Who you are: balance (and whether it runs low), quota and GPUs in use."""

    scope_area = "account"

    serializer_class = s.MeSerializer
    pagination_class = None

    def get(self, request, *args, **kwargs):
        user, account = request.user, account_of(request)
        money = balance_status(user=account)
        data = {
            "email": user.email,
            "full_name": user.full_name,
            "balance": money.balance,
            "gpu_quota": account.gpu_quota,
            "gpus_in_use": rental_selectors.gpus_held_by(user=account),
            "credit_limit": money.credit_limit,
            "hourly_burn": money.hourly_burn,
            "hours_left": money.hours_left,
            "low_balance": money.low,
            "is_staff": user.is_staff,
            "team": account.team.slug if account.pk != user.pk else None,
            "team_role": role_of(request) if account.pk != user.pk else None,
        }
        return Response(s.MeSerializer(data).data)


@extend_schema(tags=["account"])
class LogoutEverywhereView(GenericAPIView):
    """End every session of yours: console logins, JupyterLab and SSH sessions, every API
    key and every SSH key but those you keep; your webhook endpoints are turned off until you turn them
    on again. You get an e-mail saying what was ended."""

    scope_area = "account"
    team_area = None  # the person's own sessions: not through a key made for a team
    serializer_class = s.LogoutEverywhereSerializer
    pagination_class = None

    @extend_schema(
        summary="Log out everywhere (revoke every API key and SSH key but those kept)",
        request=s.LogoutEverywhereSerializer,
        responses={200: s.LoggedOutEverywhereSerializer},
    )
    def post(self, request, *args, **kwargs):
        form = s.LogoutEverywhereSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            done = account_credentials_revoke(
                user=request.user,
                reason=Reason.LOGOUT_EVERYWHERE,
                keep_key_ids=form.validated_data["keep_api_keys"],
                keep_ssh_key_ids=form.validated_data["keep_ssh_keys"],
                ip_address=client_ip(request),
            )
        except ApiKeyRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        body = {
            "at": done.at,
            "api_keys_revoked": done.revoked_keys,
            "api_keys_kept": done.kept_keys,
            "ssh_keys_removed": done.removed_ssh_keys,
            "ssh_keys_kept": done.kept_ssh_keys,
            "also": done.also,
        }
        return Response(s.LoggedOutEverywhereSerializer(body).data)
