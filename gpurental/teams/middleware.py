"""The console's acting account: the team chosen in the switcher (kept in the session), as
long as the person is still a member; else the person themself."""

from __future__ import annotations

from gpurental.teams.acting import SESSION_KEY, bind
from gpurental.teams.models import Membership


class ActingAccountMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        bind(request, None, None)
        team_id = request.session.get(SESSION_KEY) if hasattr(request, "session") else None
        if team_id and user is not None and user.is_authenticated:
            membership = (
                Membership.objects.select_related("team__account")
                .filter(team_id=team_id, user=user, team__account__is_active=True)
                .first()
            )
            if membership is None:  # removed (or the team switched off) since: back to their own
                request.session.pop(SESSION_KEY, None)
            else:
                bind(request, membership.team.account, membership.role, membership.team)
        return self.get_response(request)
