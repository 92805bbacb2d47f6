"""The console's team pages: your teams, one team's members and invitations, accepting an
invitation, and the switcher that chooses the acting account. Thin: each change is one
service; a refusal is shown naming the field and the rule."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from gpurental.teams import roles, services
from gpurental.teams.acting import SESSION_KEY
from gpurental.teams.models import Membership, Team
from gpurental.teams.selectors import membership_of, teams_of


def _refusal(request, exc) -> None:
    messages.error(request, exc.message)


@login_required
def teams(request):
    if request.method == "POST":
        try:
            team = services.team_create(
                creator=request.user,
                name=request.POST.get("name", ""),
                slug=request.POST.get("slug", ""),
            )
        except services.TeamRefused as exc:
            _refusal(request, exc)
        else:
            messages.success(request, _("Team %(name)s created.") % {"name": team.name})
            return redirect("team", slug=team.slug)
    return render(
        request,
        "teams/teams.html",
        {"choices": teams_of(user=request.user), "form": request.POST},
    )


def _mine_or_404(request, slug) -> tuple[Team, Membership]:
    team = Team.objects.filter(slug=slug).first()
    mine = membership_of(team=team, user=request.user) if team else None
    if mine is None:
        raise Http404("No such team.")
    return team, mine


@login_required
def team(request, slug):
    team, mine = _mine_or_404(request, slug)
    if request.method == "POST":
        return _team_change(request, team, mine)
    return render(
        request,
        "teams/team.html",
        {
            "team": team,
            "mine": mine,
            "members": team.memberships.select_related("user").order_by("user__email"),
            "invitations": team.invitations.filter(
                accepted_at__isnull=True, revoked_at__isnull=True
            ),
            "roles": roles.ROLES,
            "may_manage": roles.at_least(mine.role, roles.MANAGE_MEMBERS),
            "is_owner": mine.role == roles.OWNER,
        },
    )


def _team_change(request, team: Team, mine: Membership):
    what = request.POST.get("action", "")
    try:
        if what == "invite":
            invitation, _raw = services.invite(
                team=team,
                actor=request.user,
                email=request.POST.get("email", ""),
                role=request.POST.get("role", roles.MEMBER),
            )
            messages.success(
                request, _("Invitation sent to %(email)s.") % {"email": invitation.email}
            )
        elif what in ("role", "remove"):
            row = team.memberships.select_related("user").filter(pk=request.POST.get("member") or 0)
            row = row.first()
            if row is None:
                raise Http404("No such member.")
            if what == "role":
                services.role_change(
                    membership=row, role=request.POST.get("role", ""), actor=request.user
                )
                messages.success(request, _("Role changed."))
            else:
                services.member_remove(membership=row, actor=request.user)
                messages.success(request, _("Member removed."))
        elif what == "revoke":
            invitation = team.invitations.filter(pk=request.POST.get("invitation") or None).first()
            if invitation is None:
                raise Http404("No such invitation.")
            services.invitation_revoke(invitation=invitation, actor=request.user)
            messages.success(request, _("Invitation withdrawn."))
        elif what == "leave":
            services.leave(membership=mine)
            if request.session.get(SESSION_KEY) == team.pk:
                request.session.pop(SESSION_KEY)
            messages.success(request, _("You left %(name)s.") % {"name": team.name})
            return redirect("teams")
        elif what == "rename":
            services.team_rename(team=team, actor=request.user, name=request.POST.get("name", ""))
            messages.success(request, _("Team renamed."))
        else:
            messages.error(
                request, _("action: choose invite, role, remove, revoke, leave or rename")
            )
    except (services.TeamRefused, services.RoleTooLow) as exc:
        _refusal(request, exc)
    return redirect("team", slug=team.slug)


@login_required
def invitation(request, token):
    found = services.invitation_find(token=token)
    if request.method == "POST":
        try:
            membership = services.invitation_accept(token=token, user=request.user)
        except services.TeamRefused as exc:
            _refusal(request, exc)
        else:
            messages.success(request, _("You joined %(name)s.") % {"name": membership.team.name})
            return redirect("team", slug=membership.team.slug)
    return render(request, "teams/invitation.html", {"invitation": found})


@login_required
@require_POST
def switch(request):
    """Choose the acting account: a team of yours, or (empty) your own."""
    slug = request.POST.get("team", "")
    if slug:
        team = Team.objects.filter(slug=slug, account__is_active=True).first()
        if team is None or membership_of(team=team, user=request.user) is None:
            raise Http404("No such team.")
        request.session[SESSION_KEY] = team.pk
    else:
        request.session.pop(SESSION_KEY, None)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        target = "/dashboard/"
    return redirect(target)
