"""Who may act for which account, and how far."""

from __future__ import annotations

from gpurental.accounts.models import AccountKind, User
from gpurental.rentals.models import Instance
from gpurental.rentals.selectors import instance_visible_to
from gpurental.teams import roles
from gpurental.teams.models import Membership, Team


def role_in(*, user: User, account: User) -> str | None:
    """``user``'s role in the team whose account is ``account`` (None: not a member)."""
    if account.kind != AccountKind.TEAM or not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(team__account=account, user=user)
        .values_list("role", flat=True)
        .first()
    )


def may_act(*, user: User, account_id, needed: str = roles.READ) -> bool:
    """Whether ``user`` may act on what ``account_id`` owns with at least ``needed``:
    their own things always, a team's by their current role there."""
    if user.pk == account_id:
        return True
    role = (
        Membership.objects.filter(team__account_id=account_id, user=user)
        .values_list("role", flat=True)
        .first()
    )
    return roles.at_least(role, needed)


def teams_of(*, user: User):
    """(team, role) pairs of ``user``'s teams, by name."""
    rows = Membership.objects.filter(user=user).select_related("team").order_by("team__name")
    return [(m.team, m.role) for m in rows]


def membership_of(*, team: Team, user: User) -> Membership | None:
    return Membership.objects.filter(team=team, user=user).select_related("user").first()


def instance_watchable_by(*, user: User, instance_id):
    """The instance if ``user`` may watch it (status, charts): their own, any for staff, or
    a team's they belong to, whatever their role; else None. Getting in is another rule
    (``roles.OPERATORS``)."""
    found = instance_visible_to(user=user, instance_id=instance_id)
    if found is None:
        found = (
            Instance.objects.select_related("host", "plan", "image", "gpu_model")
            .filter(pk=instance_id, user__team__memberships__user=user)
            .first()
        )
    return found


def team_managers(*, account: User) -> list[User]:
    """The people who hear about a team account's events: its owners and admins."""
    rows = Membership.objects.filter(
        team__account=account, role__in=(roles.OWNER, roles.ADMIN), user__is_active=True
    ).select_related("user")
    return [m.user for m in rows.order_by("user__email")]
