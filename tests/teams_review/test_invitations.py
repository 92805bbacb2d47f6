"""Invitations: a link is used once, by the person it names, for a role its sender could
give, and (open here) only while its sender could still give it."""

import pytest
from django.core import mail

from gpurental.teams import services
from gpurental.teams.models import Invitation, Membership
from tests.factories import UserFactory
from tests.teams_review.conftest import key_client


@pytest.mark.parametrize("sender_loses", ["removed", "demoted"])
def test_an_invitation_dies_with_its_senders_right_to_invite(team, alice, dave, sender_loses):
    """Found by this review (fixed in d317185), a leak: dave (admin) invites an address;
    alice then removes dave, or demotes him to viewer, because he is leaving or no longer
    trusted. His pending invitation still works: whoever it names joins as member a week
    later. invitation_accept checks the token, the e-mail and the expiry, never whether
    invited_by may still invite."""
    _, raw = services.invite(team=team, actor=dave, email="friend@example.com", role="member")
    dave_row = Membership.objects.get(team=team, user=dave)
    if sender_loses == "removed":
        services.member_remove(membership=dave_row, actor=alice)
    else:
        services.role_change(membership=dave_row, role="viewer", actor=alice)
    friend = UserFactory(email="friend@example.com")

    with pytest.raises(services.TeamRefused):
        services.invitation_accept(token=raw, user=friend)
    assert not Membership.objects.filter(team=team, user=friend).exists()


def test_an_invitation_is_used_once(team, alice, bob):
    _, raw = services.invite(team=team, actor=alice, email=bob.email, role="viewer")
    services.invitation_accept(token=raw, user=bob)
    services.leave(membership=Membership.objects.get(team=team, user=bob))
    with pytest.raises(services.TeamRefused, match="already been used"):
        services.invitation_accept(token=raw, user=bob)
    assert not Membership.objects.filter(team=team, user=bob).exists()


def test_someone_already_in_the_team_cannot_take_a_second_role_by_invitation(team, alice, erin):
    with pytest.raises(services.TeamRefused, match="already a member"):
        services.invite(team=team, actor=alice, email=erin.email, role="owner")
    # An invitation sent before they joined another way is refused at accept.
    _, raw = services.invite(team=team, actor=alice, email="late@example.com", role="owner")
    late = UserFactory(email="late@example.com")
    Membership.objects.create(team=team, user=late, role="viewer")
    with pytest.raises(services.TeamRefused, match="already a member"):
        services.invitation_accept(token=raw, user=late)
    assert Membership.objects.get(team=team, user=late).role == "viewer"


def test_an_admin_cannot_invite_above_members_over_the_api(team, dave):
    client = key_client(dave)
    for role in ("admin", "owner"):
        response = client.post(
            "/api/v1/teams/acme/invitations/",
            {"email": "x@example.com", "role": role},
            format="json",
        )
        assert response.status_code == 403, response.content[:300]
    assert not Invitation.objects.filter(email="x@example.com").exists()


def test_a_viewer_and_an_outsider_cannot_invite_or_withdraw(team, alice, frank, bob):
    invitation, _raw = services.invite(team=team, actor=alice, email="p@example.com", role="member")
    for person, code in ((frank, 403), (bob, 404)):
        client = key_client(person)
        invited = client.post(
            "/api/v1/teams/acme/invitations/", {"email": "q@example.com"}, format="json"
        )
        withdrawn = client.delete(f"/api/v1/teams/acme/invitations/{invitation.pk}/")
        assert (invited.status_code, withdrawn.status_code) == (code, code)
    invitation.refresh_from_db()
    assert invitation.revoked_at is None
    assert not Invitation.objects.filter(email="q@example.com").exists()


def test_the_invitation_page_of_a_wrong_token_shows_nothing(client, bob):
    client.force_login(bob)
    page = client.get("/teams/invite/not-a-real-token/")
    assert page.status_code == 200 and "Acme" not in page.text
    assert client.post("/teams/invite/not-a-real-token/").status_code == 200
    assert not Membership.objects.filter(user=bob).exists()


def test_a_team_name_with_a_line_break_cannot_break_its_invitations(client, alice):
    """Found by this review (fixed in 42e9aa9), a bug: team_create and team_rename strip only
    the ends of a name, so "Acme\\r\\nBcc: …" is stored; invite() then puts it in the
    e-mail's Subject, Django refuses the header (BadHeaderError, no injection) and the admin
    gets a 500 after the invitation row was committed, with no e-mail sent: the team can
    never invite anyone. The name should be refused on the name field (or its line breaks
    folded) instead."""
    client.force_login(alice)
    created = client.post("/teams/", {"name": "Acme\r\nBcc: victim@example.com", "slug": "nl"})
    joined = Membership.objects.filter(user=alice, team__slug="nl").first()
    if joined is None:  # refused, naming the field: fine
        assert created.status_code == 200
        return
    client.raise_request_exception = False
    answer = client.post("/teams/nl/", {"action": "invite", "email": "bob@example.com"})
    assert answer.status_code == 302
    [message] = mail.outbox
    assert "\n" not in message.subject and "\r" not in message.subject
