"""Teams in the back-office: read only. Changes go through the team's own pages and
services, so that each one has its event and its rules (the last owner stays)."""

from django.contrib import admin

from gpurental.accounts.admin_mixins import ReadOnlyAdmin
from gpurental.teams.models import Invitation, Membership, Team, TeamEvent


class MembershipInline(admin.TabularInline):
    model = Membership
    fields = ["user", "role", "joined_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Team)
class TeamAdmin(ReadOnlyAdmin):
    list_display = ["name", "slug", "account", "gpu_quota", "created_at", "created_by"]
    search_fields = ["name", "slug", "memberships__user__email"]
    inlines = [MembershipInline]

    @admin.display(description="GPU quota (set on the team's account)")
    def gpu_quota(self, team: Team) -> int:
        # A new team's account starts at 0; staff raise it on the account's page.
        return team.account.gpu_quota


@admin.register(Invitation)
class InvitationAdmin(ReadOnlyAdmin):
    list_display = [
        "team",
        "email",
        "role",
        "created_at",
        "expires_at",
        "accepted_at",
        "revoked_at",
    ]
    search_fields = ["team__slug", "email"]
    exclude = ["token_hash"]


@admin.register(TeamEvent)
class TeamEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "team", "kind", "actor", "subject_email"]
    list_filter = ["kind"]
    search_fields = ["team__slug", "subject_email"]
