"""Team changes: the rules the services keep, and the event each one writes."""

import datetime as dt
import hashlib
import threading

import pytest
from django.contrib.auth import authenticate
from django.core import mail
from django.db import IntegrityError, connection, transaction
from django.test import RequestFactory
from django.utils import timezone

from gpurental.accounts.models import AccountKind
from gpurental.teams import services
from gpurental.teams.models import Invitation, Membership, TeamEvent
from tests.factories import UserFactory


def kinds(team) -> list[str]:
    return list(team.events.values_list("kind", flat=True))


def test_creating_a_team_makes_an_account_that_cannot_log_in_and_an_owner(team, alice):
    account = team.account
    assert account.kind == AccountKind.TEAM
    assert account.email == "team+acme@teams.invalid"
    assert not account.has_usable_password()
    assert authenticate(RequestFactory().post("/"), username=account.email, password="") is None
    assert Membership.objects.get(team=team, user=alice).role == "owner"
    assert kinds(team) == ["created"]


def test_a_taken_slug_is_refused_naming_the_field(team, bob):
    with pytest.raises(services.TeamRefused) as refused:
        services.team_create(creator=bob, name="Other", slug="acme")
    assert refused.value.field == "slug" and "taken" in refused.value.message


@pytest.mark.backend
def test_one_membership_per_person_and_known_roles_only(team, alice, bob):
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(team=team, user=alice, role="member")
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(team=team, user=bob, role="boss")


def test_the_last_owner_can_neither_leave_nor_be_demoted(team, alice):
    mine = Membership.objects.get(team=team, user=alice)
    with pytest.raises(services.TeamRefused, match="last owner"):
        services.leave(membership=mine)
    with pytest.raises(services.TeamRefused, match="last owner"):
        services.role_change(membership=mine, role="admin", actor=alice)
    assert Membership.objects.get(pk=mine.pk).role == "owner"


def test_with_a_second_owner_the_first_may_leave(team, alice, dave):
    theirs = Membership.objects.get(team=team, user=dave)
    services.role_change(membership=theirs, role="owner", actor=alice)
    services.leave(membership=Membership.objects.get(team=team, user=alice))
    assert not Membership.objects.filter(team=team, user=alice).exists()
    assert kinds(team)[-2:] == ["role_changed", "left"]


def test_an_admin_cannot_make_owners_or_remove_admins(team, alice, dave):
    other_admin = UserFactory(email="gina@example.com")
    row = Membership.objects.create(team=team, user=other_admin, role="admin")
    with pytest.raises(services.RoleTooLow, match="only an owner"):
        services.member_remove(membership=row, actor=dave)
    with pytest.raises(services.RoleTooLow, match="only an owner"):
        services.invite(team=team, actor=dave, email="new@example.com", role="owner")


def test_a_member_may_not_invite(team, erin):
    with pytest.raises(services.RoleTooLow, match="admin role or higher"):
        services.invite(team=team, actor=erin, email="new@example.com", role="viewer")


def test_invitation_mails_a_link_and_stores_only_the_tokens_hash(team, alice, settings):
    settings.PUBLIC_URL = "https://gpu.example.org"
    invitation, raw = services.invite(
        team=team, actor=alice, email="New@Example.com", role="member"
    )
    assert invitation.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(Invitation.objects.filter(pk=invitation.pk).values().get())
    assert invitation.expires_at - invitation.created_at == dt.timedelta(days=7)
    [message] = mail.outbox
    assert message.to == ["New@Example.com"]
    assert f"https://gpu.example.org/teams/invite/{raw}/" in message.body
    assert kinds(team)[-1] == "invited"


def test_accepting_checks_the_email_case_insensitively_and_joins(team, alice):
    _, raw = services.invite(team=team, actor=alice, email="New@Example.com", role="viewer")
    stranger = UserFactory(email="someone@example.com")
    with pytest.raises(services.TeamRefused, match="is for New@Example.com"):
        services.invitation_accept(token=raw, user=stranger)
    invitee = UserFactory(email="new@example.com")
    membership = services.invitation_accept(token=raw, user=invitee)
    assert membership.role == "viewer"
    assert kinds(team)[-1] == "joined"
    with pytest.raises(services.TeamRefused, match="already been used"):
        services.invitation_accept(token=raw, user=invitee)


def test_an_expired_or_revoked_invitation_is_refused(team, alice):
    invitee = UserFactory(email="late@example.com")
    _, raw = services.invite(team=team, actor=alice, email=invitee.email, role="member")
    later = timezone.now() + dt.timedelta(days=7, seconds=1)
    with pytest.raises(services.TeamRefused, match="expired"):
        services.invitation_accept(token=raw, user=invitee, now=later)
    invitation, raw2 = services.invite(team=team, actor=alice, email=invitee.email, role="member")
    services.invitation_revoke(invitation=invitation, actor=alice)
    with pytest.raises(services.TeamRefused, match="withdrawn"):
        services.invitation_accept(token=raw2, user=invitee)
    with pytest.raises(services.TeamRefused, match="not valid"):
        services.invitation_accept(token="nonsense", user=invitee)
    assert not Membership.objects.filter(team=team, user=invitee).exists()


@pytest.mark.backend
def test_every_change_writes_its_event_and_events_are_append_only(team, alice, erin):
    row = Membership.objects.get(team=team, user=erin)
    services.role_change(membership=row, role="viewer", actor=alice)
    services.member_remove(membership=row, actor=alice)
    event = TeamEvent.objects.filter(team=team, kind="removed").get()
    assert (event.actor, event.subject_email, event.detail) == (
        alice,
        "erin@example.com",
        {"role": "viewer"},
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamEvent.objects.filter(pk=event.pk).update(kind="created")


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_two_owners_demoting_each_other_at_once_leave_one_owner():
    alice, dave = UserFactory(email="alice@example.com"), UserFactory(email="dave@example.com")
    team = services.team_create(creator=alice, name="Race", slug="race")
    Membership.objects.create(team=team, user=dave, role="owner")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def demote(actor, target):
        try:
            row = Membership.objects.get(team=team, user=target)
            barrier.wait()
            services.role_change(membership=row, role="admin", actor=actor)
            outcomes.append("demoted")
        except (services.TeamRefused, services.RoleTooLow):
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=demote, args=(alice, dave)),
        threading.Thread(target=demote, args=(dave, alice)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["demoted", "refused"]
    assert Membership.objects.filter(team=team, role="owner").count() == 1


@pytest.mark.parametrize("sender_loses", ["removed", "demoted"])
def test_an_invitation_dies_with_its_senders_right_to_send_it(team, alice, dave, sender_loses):
    _, raw = services.invite(team=team, actor=dave, email="friend@example.com", role="member")
    dave_row = Membership.objects.get(team=team, user=dave)
    if sender_loses == "removed":
        services.member_remove(membership=dave_row, actor=alice)
    else:
        services.role_change(membership=dave_row, role="viewer", actor=alice)
    friend = UserFactory(email="friend@example.com")
    with pytest.raises(services.TeamRefused, match="may no longer invite"):
        services.invitation_accept(token=raw, user=friend)
    assert not Membership.objects.filter(team=team, user=friend).exists()


@pytest.mark.parametrize("name", ["Acme\r\nBcc: victim@example.com", "Tab\there", "Sep\u2028ar"])
def test_a_name_on_more_than_one_line_is_refused_naming_the_field(team, alice, name):
    with pytest.raises(services.TeamRefused) as refused:
        services.team_create(creator=alice, name=name, slug="other")
    assert refused.value.field == "name" and "line breaks" in refused.value.message
    with pytest.raises(services.TeamRefused):
        services.team_rename(team=team, actor=alice, name=name)
