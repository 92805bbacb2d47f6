"""The acting account of a request: whose instances, balance and invoices it sees and acts
on. ``request.account`` is the person themself, or a team's account when the console's
switcher (the session) or the API key says so; ``request.team_role`` is the person's role
in that team (None when acting as oneself, or when no longer a member).

The membership is read again on every request, so a role change or a removal counts at
once, for the console and for keys alike.
"""

from __future__ import annotations

import functools

from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _

from gpurental.accounts.models import AccountKind
from gpurental.teams import roles
from gpurental.teams.models import Membership

SESSION_KEY = "acting_team"


def bind(request, account, role: str | None, team=None) -> None:
    """Set the acting account on the Django request (a DRF request reads through to it)."""
    target = getattr(request, "_request", request)
    target.account, target.team_role, target.team = account, role, team


def bind_team(request, *, user, team) -> None:
    """Act as ``team`` (``user``'s current role there; None if not a member)."""
    role = Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()
    bind(request, team.account, role, team)


def account_of(request):
    """The account whose objects this request lists, creates and changes."""
    user = request.user  # on a DRF request this runs the authenticators first
    account = getattr(request, "account", None)
    return user if account is None or not user.is_authenticated else account


def role_of(request) -> str | None:
    return getattr(request, "team_role", None)


def acting_for_team(request) -> bool:
    account = account_of(request)
    return account.pk != request.user.pk and account.kind == AccountKind.TEAM


def role_refusal(request, needed: str) -> str | None:
    """Why this request may not do what needs ``needed`` in its team (None: it may)."""
    if not acting_for_team(request):
        return None
    role = role_of(request)
    if role is None:
        return _("you are no longer a member of this team")
    if roles.at_least(role, needed):
        return None
    return _("your role in this team is %(role)s; this needs the %(needed)s role or higher") % {
        "role": role,
        "needed": needed,
    }


def require_role(request, needed: str) -> None:
    """Raise Django's PermissionDenied (403) unless the request's role reaches ``needed``."""
    reason = role_refusal(request, needed)
    if reason:
        raise PermissionDenied(reason)


def needs_role(needed: str):
    """A console view decorator: acting for a team, the person's role must reach ``needed``
    (403 naming it)."""

    def wrap(view):
        @functools.wraps(view)
        def checked(request, *args, **kwargs):
            require_role(request, needed)
            return view(request, *args, **kwargs)

        return checked

    return wrap
