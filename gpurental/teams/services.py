"""Every change to a team: one service each, in a transaction, with the team row locked
(so that two requests cannot both remove "the other" owner), and one ``TeamEvent``."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
import unicodedata

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _

from gpurental.accounts.models import AccountKind, User
from gpurental.rentals.events import state_channel, state_redis
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.teams import roles
from gpurental.teams.models import Invitation, Membership, Team, TeamEvent, TeamEventKind

log = logging.getLogger(__name__)

INVITATION_DAYS = 7
TEAM_EMAIL_DOMAIN = "teams.invalid"
RESERVED_SLUGS = {
    "switch",
    "invite",
}  # console paths under /teams/  # RFC 2606: never delivered anywhere


class TeamRefused(ValueError):
    """A change that breaks a rule; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str = "non_field_errors"):
        super().__init__(message)
        self.message, self.field = message, field


class RoleTooLow(PermissionError):
    """The actor's role does not allow this change."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _event(team: Team, kind: str, *, actor: User | None, subject: str = "", **detail):
    return TeamEvent.objects.create(
        team=team, kind=kind, actor=actor, subject_email=subject, detail=detail
    )


def _locked(team: Team) -> Team:
    return Team.objects.select_for_update().get(pk=team.pk)


def _role_of(team: Team, user: User) -> str | None:
    return Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()


def _require(team: Team, actor: User, needed: str) -> str:
    role = _role_of(team, actor)
    if role is None:
        raise RoleTooLow(_("you are not a member of this team"))
    if not roles.at_least(role, needed):
        raise RoleTooLow(
            _("your role in this team is %(role)s; this needs the %(needed)s role or higher")
            % {"role": role, "needed": needed}
        )
    return role


def _check_role_value(role: str) -> None:
    if role not in roles.ROLES:
        raise TeamRefused(
            _("role: %(role)r is not a role; choose from %(roles)s")
            % {"role": role, "roles": ", ".join(roles.ROLES)},
            field="role",
        )


def _grantable(actor_role: str | None, role: str, *, current: str | None = None) -> bool:
    """Admins manage members and viewers; only owners touch admins and owners."""
    if not roles.at_least(actor_role, roles.MANAGE_MEMBERS):
        return False
    touches_high = roles.RANK[role] >= roles.RANK[roles.ADMIN] or (
        current is not None and roles.RANK[current] >= roles.RANK[roles.ADMIN]
    )
    return actor_role == roles.OWNER or not touches_high


def _may_grant(actor_role: str, role: str, *, current: str | None = None) -> None:
    if not _grantable(actor_role, role, current=current):
        raise RoleTooLow(
            _(
                "your role in this team is %(role)s; only an owner may give, change or "
                "remove the admin and owner roles"
            )
            % {"role": actor_role}
        )


def _access_lost(team: Team) -> None:
    """Someone may no longer get into the team's instances: once this commits, the gateway
    is woken (the instances' state channels) to read their operators again and close the
    open websockets (terminals, kernels) of whoever lost access."""
    running = list(
        Instance.objects.filter(user=team.account, status=InstanceStatus.RUNNING).values_list(
            "pk", flat=True
        )
    )

    def wake() -> None:
        for pk in running:
            try:
                state_redis().publish(state_channel(pk), "changed")
            except Exception:  # noqa: BLE001 - the route's TTL still ends the access
                log.warning("could not wake the gateway for instance %s", pk, exc_info=True)

    if running:
        transaction.on_commit(wake)


def _name_checked(name: str) -> str:
    """A team's name: 1 to 100 characters on one line (it goes into e-mail subjects)."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise TeamRefused(_("name: give the team a name of 1 to 100 characters"), field="name")
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in name):
        raise TeamRefused(
            _("name: one line of text, without line breaks or control characters"), field="name"
        )
    return name


def _owners(team: Team) -> int:
    return Membership.objects.filter(team=team, role=roles.OWNER).count()


@transaction.atomic
def team_create(*, creator: User, name: str, slug: str = "", now=None) -> Team:
    """A team with its own account; the creator is its first owner. The account's GPU
    quota starts at 0: staff set it (the admin), so that a team is no way around a
    person's own quota."""
    now = now or timezone.now()
    name = _name_checked(name)
    slug = slugify(slug or name)[:50].strip("-")
    if not slug:
        raise TeamRefused(
            _("slug: needs at least one letter or digit (a-z, 0-9, '-')"), field="slug"
        )
    if slug in RESERVED_SLUGS:
        raise TeamRefused(
            _("slug: %(slug)r is reserved; choose another") % {"slug": slug}, field="slug"
        )
    if creator.kind == AccountKind.TEAM:
        raise TeamRefused(_("a team account cannot create teams"))
    email = f"team+{slug}@{TEAM_EMAIL_DOMAIN}"
    if Team.objects.filter(slug=slug).exists() or User.objects.filter(email__iexact=email).exists():
        raise TeamRefused(
            _("slug: %(slug)r is taken; choose another") % {"slug": slug}, field="slug"
        )
    account = User.objects.create_user(
        email=email,
        password=None,  # unusable: a team account never logs in
        full_name=name,
        company=name,
        kind=AccountKind.TEAM,
        gpu_quota=0,
    )
    try:
        with transaction.atomic():
            team = Team.objects.create(
                name=name, slug=slug, account=account, created_by=creator, created_at=now
            )
    except IntegrityError as exc:  # a concurrent create took the slug
        raise TeamRefused(
            _("slug: %(slug)r is taken; choose another") % {"slug": slug}, field="slug"
        ) from exc
    Membership.objects.create(team=team, user=creator, role=roles.OWNER, joined_at=now)
    _event(team, TeamEventKind.CREATED, actor=creator, subject=creator.email, name=name)
    return team


@transaction.atomic
def team_rename(*, team: Team, actor: User, name: str) -> Team:
    team = _locked(team)
    _require(team, actor, roles.OWNER)
    name = _name_checked(name)
    old, team.name = team.name, name
    team.save(update_fields=["name"])
    _event(team, TeamEventKind.RENAMED, actor=actor, old=old, new=name)
    return team


def invite(*, team: Team, actor: User, email: str, role: str, now=None) -> tuple[Invitation, str]:
    """Invite ``email`` as ``role``; sends the link by e-mail and returns (row, raw token)."""
    now = now or timezone.now()
    email = (email or "").strip()
    _check_role_value(role)
    if "@" not in email or len(email) > 254:
        raise TeamRefused(
            _("email: give the e-mail address of the person to invite"), field="email"
        )
    with transaction.atomic():
        # The inviter's row first (their allowance over all their teams), then the team's.
        User.objects.select_for_update().filter(pk=actor.pk).first()
        team = _locked(team)
        actor_role = _require(team, actor, roles.MANAGE_MEMBERS)
        _may_grant(actor_role, role)
        if Membership.objects.filter(team=team, user__email__iexact=email).exists():
            raise TeamRefused(
                _("email: %(email)s is already a member of this team") % {"email": email},
                field="email",
            )
        # Each invitation e-mails an address anyone may type: a team's daily allowance keeps
        # the platform from being a mailer (counted under the team's lock, so two at once
        # cannot both take the last one).
        per_day = settings.TEAM_INVITATIONS_PER_DAY
        if (
            Invitation.objects.filter(team=team, created_at__gt=now - dt.timedelta(days=1)).count()
            >= per_day
        ):
            raise TeamRefused(
                _(
                    "email: this team has sent %(limit)s invitations in the last 24 hours, "
                    "the most allowed (TEAM_INVITATIONS_PER_DAY); try again later"
                )
                % {"limit": per_day},
                field="email",
            )
        # And a person's allowance over every team they manage: making more teams is no
        # way around the team's.
        per_person = settings.PERSON_INVITATIONS_PER_DAY
        if (
            Invitation.objects.filter(
                invited_by=actor, created_at__gt=now - dt.timedelta(days=1)
            ).count()
            >= per_person
        ):
            raise TeamRefused(
                _(
                    "email: you have sent %(limit)s invitations in the last 24 hours over all "
                    "your teams, the most allowed (PERSON_INVITATIONS_PER_DAY); try again later"
                )
                % {"limit": per_person},
                field="email",
            )
        raw = secrets.token_urlsafe(32)
        invitation = Invitation.objects.create(
            team=team,
            email=email,
            role=role,
            token_hash=_hash(raw),
            created_at=now,
            expires_at=now + dt.timedelta(days=INVITATION_DAYS),
            invited_by=actor,
        )
        _event(team, TeamEventKind.INVITED, actor=actor, subject=email, role=role)
    link = f"{settings.PUBLIC_URL.rstrip('/')}/teams/invite/{raw}/"
    send_mail(
        subject=_("Join the team %(team)s on gpurental") % {"team": team.name},
        message=_(
            "%(actor)s invites you to the team %(team)s as %(role)s.\n\n"
            "Accept within %(days)s days, logged in as %(email)s:\n%(link)s\n"
        )
        % {
            "actor": actor.email,
            "team": team.name,
            "role": role,
            "days": INVITATION_DAYS,
            "email": email,
            "link": link,
        },
        from_email=None,
        recipient_list=[email],
    )
    return invitation, raw


def invitation_find(*, token: str) -> Invitation | None:
    return Invitation.objects.select_related("team").filter(token_hash=_hash(token or "")).first()


def _sender_may_still_invite(team: Team, invitation: Invitation) -> bool:
    """An invitation speaks for its sender: it holds only while they could send it now (a
    sender removed or demoted since, and what they sent is void)."""
    if invitation.invited_by_id is None:
        return False
    return _grantable(_role_of(team, invitation.invited_by), invitation.role)


@transaction.atomic
def invitation_accept(*, token: str, user: User, now=None) -> Membership:
    now = now or timezone.now()
    found = Invitation.objects.filter(token_hash=_hash(token or "")).first()
    if found is None:
        raise TeamRefused(
            _("this invitation link is not valid: check that it is complete"), field="token"
        )
    # The team row first, then the invitation: the order every team service locks in (a
    # withdrawal at the same moment would otherwise deadlock with this).
    team = _locked(found.team)
    invitation = Invitation.objects.select_for_update().get(pk=found.pk)
    state = invitation.state(now)
    if state == "accepted":
        raise TeamRefused(_("this invitation has already been used"), field="token")
    if state == "revoked":
        raise TeamRefused(_("this invitation was withdrawn by the team"), field="token")
    if state == "expired":
        raise TeamRefused(
            _("this invitation expired on %(at)s UTC; ask the team for a new one")
            % {"at": f"{invitation.expires_at:%Y-%m-%d %H:%M}"},
            field="token",
        )
    if invitation.email.lower() != user.email.lower():
        raise TeamRefused(
            _("this invitation is for %(email)s; log in with that address to accept it")
            % {"email": invitation.email},
            field="email",
        )
    if not _sender_may_still_invite(team, invitation):
        raise TeamRefused(
            _(
                "this invitation was sent by someone who may no longer invite to this team; "
                "ask the team for a new one"
            ),
            field="token",
        )
    if Membership.objects.filter(team=team, user=user).exists():
        raise TeamRefused(_("you are already a member of this team"), field="token")
    membership = Membership.objects.create(
        team=team, user=user, role=invitation.role, joined_at=now
    )
    invitation.accepted_at, invitation.accepted_by = now, user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    _event(team, TeamEventKind.JOINED, actor=user, subject=user.email, role=invitation.role)
    return membership


@transaction.atomic
def invitation_revoke(*, invitation: Invitation, actor: User, now=None) -> Invitation:
    now = now or timezone.now()
    team = _locked(invitation.team)
    actor_role = _require(team, actor, roles.MANAGE_MEMBERS)
    _may_grant(actor_role, invitation.role)
    updated = Invitation.objects.filter(
        pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True
    ).update(revoked_at=now)
    if updated:
        _event(team, TeamEventKind.INVITATION_REVOKED, actor=actor, subject=invitation.email)
    invitation.refresh_from_db()
    return invitation


@transaction.atomic
def role_change(*, membership: Membership, role: str, actor: User) -> Membership:
    _check_role_value(role)
    team = _locked(membership.team)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    actor_role = _require(team, actor, roles.MANAGE_MEMBERS)
    _may_grant(actor_role, role, current=membership.role)
    if membership.role == role:
        return membership
    if membership.role == roles.OWNER and _owners(team) == 1:
        raise TeamRefused(
            _("role: this is the team's last owner; make someone else owner first"), field="role"
        )
    old, membership.role = membership.role, role
    membership.save(update_fields=["role"])
    _event(
        team,
        TeamEventKind.ROLE_CHANGED,
        actor=actor,
        subject=membership.user.email,
        old=old,
        new=role,
    )
    if role not in roles.OPERATORS:
        _access_lost(team)
    return membership


@transaction.atomic
def member_remove(*, membership: Membership, actor: User) -> None:
    team = _locked(membership.team)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.user_id == actor.pk:
        raise TeamRefused(_("to remove yourself, leave the team"), field="user")
    actor_role = _require(team, actor, roles.MANAGE_MEMBERS)
    _may_grant(actor_role, membership.role, current=membership.role)
    if membership.role == roles.OWNER and _owners(team) == 1:
        raise TeamRefused(_("this is the team's last owner"), field="user")
    email, role = membership.user.email, membership.role
    membership.delete()
    _event(team, TeamEventKind.REMOVED, actor=actor, subject=email, role=role)
    _access_lost(team)


@transaction.atomic
def leave(*, membership: Membership) -> None:
    team = _locked(membership.team)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.role == roles.OWNER and _owners(team) == 1:
        raise TeamRefused(
            _("you are the team's last owner: make someone else owner before you leave"),
            field="user",
        )
    user, role = membership.user, membership.role
    membership.delete()
    _event(team, TeamEventKind.LEFT, actor=user, subject=user.email, role=role)
    _access_lost(team)
