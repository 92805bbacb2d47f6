"""API-key authentication: ``Authorization: Bearer gpr_…``."""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from gpurental.accounts.models import AccountKind, ApiKeyScope
from gpurental.accounts.services import api_key_authenticate
from gpurental.teams.acting import bind, bind_team

KEYWORD = b"bearer"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``request.user`` is the key's owner and ``request.auth`` the ``ApiKey`` row; a key
    made for a team sets the acting account (``gpurental.teams.acting``) to the team's.

    A request without a Bearer header is left to the next authenticator (the console's
    session). A Bearer header with a wrong or revoked key is refused outright: 401,
    whatever else the request carries.
    """

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                _("the Authorization header must be 'Bearer <API key>', with one key and no spaces")
            )
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raw = None
        key = api_key_authenticate(raw=raw) if raw else None
        if key is not None and key.user.kind == AccountKind.TEAM:
            key = None  # a team account never logs in, not even with a key
        if key is None:
            # One answer for unknown, malformed and revoked keys: nothing to learn from it.
            raise exceptions.AuthenticationFailed(
                _(
                    "the API key in the Authorization header is not valid: it is unknown, "
                    "revoked or expired"
                )
            )
        user = key.user
        if ApiKeyScope.STAFF not in key.scopes:
            # Staff powers never come through a key without the staff scope: for this
            # request the owner is a customer like any other (never saved).
            user.is_staff = user.is_superuser = False
            user._scoped_down = True
        if key.team_id is not None:
            # A team's key acts as the team's account, with the member's role as it is now.
            bind_team(request, user=user, team=key.team)
        else:
            bind(request, None, None)
        return user, key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) to unauthenticated requests.
        return 'Bearer realm="api"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "gpurental.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "gpr_<prefix>_<secret>",
            "description": "An API key from the console or POST /api/v1/api-keys/.",
        }
