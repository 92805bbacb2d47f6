"""What an API key may do (``ApiKey.scopes``). Each view names its area (``scope_area``):

| area | read (GET) | change |
| --- | --- | --- |
| ``catalog`` | any scope | nothing to change |
| ``account`` (API keys, SSH keys, webhooks, preferences, log out everywhere) | any scope | ``account`` (a new key gets at most its creator's scopes) |
| ``instances`` (and groups), ``reservations`` (and leases) | ``read`` or the area's scope | the area's scope |
| ``billing`` (and payments) | ``billing`` | ``billing`` |
| ``teams`` | any scope | every customer scope: who is in a team decides everything |

So a ``read`` key changes nothing anywhere (``tests/api/test_key_scopes.py`` walks every
route that changes something). A view that names no area is ``catalog``: reading only.

A console session is not a key: it has its user's own rights.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework.permissions import SAFE_METHODS, BasePermission

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKey, ApiKeyScope
from gpurental.teams import roles
from gpurental.teams.acting import acting_for_team, role_of, role_refusal

ANY = frozenset(ApiKeyScope.values)


def scopes_needed(area: str, method: str) -> frozenset[str]:
    """Any one of these scopes lets a key make this request."""
    if area == "billing":
        return frozenset({ApiKeyScope.BILLING})
    if area in ("instances", "reservations"):
        if method in SAFE_METHODS:
            return frozenset({ApiKeyScope.READ, area})
        return frozenset({area})
    if method in SAFE_METHODS:
        return ANY
    if area == "account":
        return frozenset({ApiKeyScope.ACCOUNT})
    # The catalog (and a view that names no area) is read-only through a key; staff change
    # it in the back-office.
    return frozenset({ApiKeyScope.STAFF})


class KeyScopes(BasePermission):
    def has_permission(self, request, view) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True
        area = getattr(view, "scope_area", "catalog")
        if area == "teams" and request.method not in SAFE_METHODS:
            # Inviting or promoting someone hands over the team's balance and rentals: a
            # key limited to some scopes (a dashboard's read key) may not.
            missing = sorted(set(CUSTOMER_SCOPES) - set(key.scopes))
            if missing:
                self.message = _(
                    "this API key may not change a team's members: that needs a key with every "
                    "customer scope (%(all)s), and this one lacks %(missing)s"
                ) % {"all": ", ".join(sorted(CUSTOMER_SCOPES)), "missing": ", ".join(missing)}
                return False
            return True
        needed = scopes_needed(area, request.method)
        if needed & set(key.scopes):
            return True
        self.message = _(
            "this API key may not do that: it needs the %(needed)s scope, and has %(has)s"
        ) % {"needed": " or ".join(sorted(needed)), "has": ", ".join(key.scopes)}
        return False


class TeamRole(BasePermission):
    """Acting for a team, the member's role there decides (``teams.roles``): reading
    needs viewer, changing needs the view's ``team_area`` role (default: its
    ``scope_area``). Views with ``team_area = None`` are personal (API keys, SSH keys).

    A key made for a team acts only within that team: once its holder has left, it is
    refused everywhere; and it reaches no personal view (SSH keys, notifications) but
    those marked ``team_key_ok``, which keep it to its team themselves."""

    def has_permission(self, request, view) -> bool:
        if not request.user.is_authenticated:
            return True
        key = request.auth
        team_key = isinstance(key, ApiKey) and key.team_id is not None
        if team_key and role_of(request) is None:
            self.message = _("you are no longer a member of this team")
            return False
        if team_key and not key.team.account.is_active:
            # Switched off by the operator: nobody acts for it (as for a person's account).
            self.message = _("the team %(team)s is switched off; ask the operator") % {
                "team": key.team.slug
            }
            return False
        area = getattr(view, "team_area", getattr(view, "scope_area", "catalog"))
        if area is None:
            if team_key and not getattr(view, "team_key_ok", False):
                self.message = _(
                    "this API key acts for the team %(team)s: your own SSH keys, notifications "
                    "and settings need a key of your own account"
                ) % {"team": key.team.slug}
                return False
            return True
        if not acting_for_team(request):
            return True
        reads = request.method in SAFE_METHODS or area in ("catalog", "account")
        if reads or getattr(view, "action", None) in getattr(view, "read_actions", ()):
            needed = roles.READ
        else:
            needed = roles.change_needs(area)
        reason = role_refusal(request, needed)
        if reason:
            self.message = reason
            return False
        return True
