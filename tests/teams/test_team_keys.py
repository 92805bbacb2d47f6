"""A key made for a team acts within that team only: it makes keys for that team alone,
reaches none of its holder's personal settings, and dies with the membership. Changing
who is in a team needs a key with every customer scope."""

import asyncssh

from gpurental.accounts.models import ApiKey, SSHKey
from gpurental.rentals.models import Instance
from gpurental.teams import services
from gpurental.teams.models import Invitation, Membership
from tests.api.conftest import assert_error
from tests.teams.test_permission_matrix import key_client


def _ssh_line() -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return " ".join(key.export_public_key().decode().split()[:2])


def test_a_team_key_makes_keys_for_its_team_only(team, erin, bob):
    other = services.team_create(creator=bob, name="Other", slug="other")
    Membership.objects.create(team=other, user=erin, role="admin")
    client = key_client(erin, team=team)

    for body in ({"name": "escape"}, {"name": "escape", "team": "other"}):
        refused = client.post("/api/v1/api-keys/", body, format="json")
        assert_error(refused, 400, "invalid", field="team")
    assert not ApiKey.objects.filter(name="escape").exists()

    made = client.post("/api/v1/api-keys/", {"name": "rotated", "team": "acme"}, format="json")
    assert made.status_code == 201 and made.json()["team"] == "acme"
    key_client(erin)  # a personal key of hers, which the team key must not list
    listed = {k["team"] for k in client.get("/api/v1/api-keys/").json()["results"]}
    assert listed == {"acme"}


def test_a_team_key_reaches_no_personal_settings_nor_other_teams(team, erin, bob):
    other = services.team_create(creator=bob, name="Other", slug="other")
    Membership.objects.create(team=other, user=erin, role="admin")
    client = key_client(erin, team=team)

    ssh = client.post("/api/v1/ssh-keys/", {"name": "x", "public_key": _ssh_line()}, format="json")
    assert_error(ssh, 403, "permission_denied")
    assert "acts for the team acme" in ssh.json()["error"]["message"]
    assert client.get("/api/v1/notification-preferences/").status_code == 403
    assert not SSHKey.objects.filter(user=erin).exists()
    assert [t["slug"] for t in client.get("/api/v1/teams/").json()] == ["acme"]
    assert_error(client.get("/api/v1/teams/other/members/"), 404, "not_found")
    assert client.post("/api/v1/teams/", {"name": "New"}, format="json").status_code == 403


def test_a_removed_members_team_key_is_dead_everywhere(team, alice, erin):
    client = key_client(erin, team=team)
    services.member_remove(membership=Membership.objects.get(team=team, user=erin), actor=alice)

    for response in (
        client.get("/api/v1/me/"),
        client.get("/api/v1/api-keys/"),
        client.post("/api/v1/api-keys/", {"name": "after", "team": "acme"}, format="json"),
    ):
        assert response.status_code == 403
        assert "no longer a member" in response.json()["error"]["message"]
    assert not ApiKey.objects.filter(name="after").exists()


def test_a_read_only_key_reads_the_team_but_cannot_change_its_members(team, alice, erin):
    reader = key_client(alice, scopes=["read"])
    erin_row = Membership.objects.get(team=team, user=erin)
    assert reader.get("/api/v1/teams/acme/members/").status_code == 200

    invited = reader.post(
        "/api/v1/teams/acme/invitations/",
        {"email": "m@example.com", "role": "owner"},
        format="json",
    )
    promoted = reader.patch(f"/api/v1/teams/acme/members/{erin_row.pk}/", {"role": "owner"})

    for refused in (invited, promoted):
        assert_error(refused, 403, "permission_denied")
        assert "every customer scope" in refused.json()["error"]["message"]
    assert not Invitation.objects.exists()
    assert Membership.objects.get(pk=erin_row.pk).role == "member"


def test_a_switched_off_team_is_acted_for_by_nobody(client, team, erin):
    api = key_client(erin, team=team)
    client.force_login(erin)
    client.post("/teams/switch/", {"team": "acme", "next": "/dashboard/"})
    team.account.is_active = False
    team.account.save(update_fields=["is_active"])

    launched = api.post(
        "/api/v1/instances/",
        {"gpu_model": "A100", "gpu_count": 1, "image": "jupyter-cpu"},
        format="json",
    )
    assert_error(launched, 403, "permission_denied")
    assert "switched off" in launched.json()["error"]["message"]
    assert not Instance.objects.filter(user=team.account).exists()
    # The console falls back to her own account and will not switch to it again.
    assert client.get("/api/v1/me/").json()["team"] is None
    assert client.post("/teams/switch/", {"team": "acme"}).status_code == 404
