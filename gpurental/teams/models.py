"""Teams: an organisation whose balance, quota, invoices and rentals are one account.

A team IS an account (``Team.account``, a ``User`` with ``kind="team"`` that can never log
in), so everything billed or owned per user works for teams unchanged. Who may act for
that account, and how far, is ``Membership.role`` (see ``roles.py``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from gpurental.teams import roles


class Role(models.TextChoices):
    OWNER = roles.OWNER, "owner"
    ADMIN = roles.ADMIN, "admin"
    MEMBER = roles.MEMBER, "member"
    VIEWER = roles.VIEWER, "viewer"


class Team(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    account = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="team",
        help_text="The team's account: its balance, quota, invoices and rentals.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name", "slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=8, choices=Role.choices)
    joined_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team", "user__email"]
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_one_per_person"),
            models.CheckConstraint(condition=Q(role__in=roles.ROLES), name="membership_role_known"),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) in {self.team}"


class Invitation(models.Model):
    """An invitation by e-mail. Only the token's SHA-256 is stored; the link carries it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=8, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(role__in=roles.ROLES), name="invitation_role_known"),
        ]

    def __str__(self) -> str:
        return f"{self.email} to {self.team} as {self.role}"

    def state(self, now=None) -> str:
        now = now or timezone.now()
        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "pending"


class TeamEventKind(models.TextChoices):
    CREATED = "created", "created"
    INVITED = "invited", "invited"
    INVITATION_REVOKED = "invitation_revoked", "invitation revoked"
    JOINED = "joined", "joined"
    ROLE_CHANGED = "role_changed", "role changed"
    REMOVED = "removed", "removed"
    LEFT = "left", "left"
    RENAMED = "renamed", "renamed"


class TeamEvent(models.Model):
    """Append-only: every change to a team, who made it and to whom."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=TeamEventKind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    subject_email = models.EmailField(blank=True, help_text="The person the change is about")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.team} {self.kind} {self.subject_email}"
