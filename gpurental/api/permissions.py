"""What an API key may do (``ApiKey.scopes``). Each view names its area (``scope_area``):

| area | read (GET) | change |
| --- | --- | --- |
| ``catalog``, ``account`` | any scope | any scope (a new key gets at most its creator's) |
| ``instances``, ``reservations`` | ``read`` or the area's scope | the area's scope |
| ``billing`` | ``billing`` | ``billing`` |

A console session is not a key: it has its user's own rights.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework.permissions import SAFE_METHODS, BasePermission

from gpurental.accounts.models import ApiKey, ApiKeyScope
from gpurental.teams import roles
from gpurental.teams.acting import acting_for_team, role_refusal

ANY = frozenset(ApiKeyScope.values)


def scopes_needed(area: str, method: str) -> frozenset[str]:
    """Any one of these scopes lets a key make this request."""
    if area == "billing":
        return frozenset({ApiKeyScope.BILLING})
    if area in ("instances", "reservations"):
        if method in SAFE_METHODS:
            return frozenset({ApiKeyScope.READ, area})
        return frozenset({area})
    return ANY


class KeyScopes(BasePermission):
    def has_permission(self, request, view) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True
        needed = scopes_needed(getattr(view, "scope_area", "catalog"), request.method)
        if needed & set(key.scopes):
            return True
        self.message = _(
            "this API key may not do that: it needs the %(needed)s scope, and has %(has)s"
        ) % {"needed": " or ".join(sorted(needed)), "has": ", ".join(key.scopes)}
        return False


class TeamRole(BasePermission):
    """Acting for a team, the member's role there decides (``teams.roles``): reading
    needs viewer, changing needs the view's ``team_area`` role (default: its
    ``scope_area``). Views with ``team_area = None`` are personal (API keys, SSH keys)."""

    def has_permission(self, request, view) -> bool:
        if not request.user.is_authenticated or not acting_for_team(request):
            return True
        area = getattr(view, "team_area", getattr(view, "scope_area", "catalog"))
        if area is None:
            return True
        if request.method in SAFE_METHODS or area in ("catalog", "account"):
            needed = roles.READ
        else:
            needed = roles.change_needs(area)
        reason = role_refusal(request, needed)
        if reason:
            self.message = reason
            return False
        return True
