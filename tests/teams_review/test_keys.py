"""API keys and teams: what a key made for a team, or a read-only key, can reach beyond
what it was made for."""

import asyncssh
import pytest

from gpurental.accounts.models import ApiKey, SSHKey
from gpurental.accounts.services import ApiKeyRefused
from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from gpurental.teams import services
from gpurental.teams.models import Invitation, Membership
from tests.teams_review.conftest import key_client

LAUNCH = {"gpu_model": "A100", "gpu_count": 1, "image": "jupyter-cpu"}


def _ssh_line() -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return " ".join(key.export_public_key().decode().split()[:2])


@pytest.mark.parametrize("target", ["personal", "another team"])
def test_a_key_made_for_a_team_cannot_mint_keys_for_other_accounts(team, erin, bob, target):
    """Found by this review (fixed in c708148): a key bound to team acme (say, handed to acme's
    CI) can POST /api-keys/ and get a key for erin's own account (her balance, her
    instances) or for another team of hers: the "a new key gets at most its creator's" rule
    covers scopes, not the account."""
    other = services.team_create(creator=bob, name="Other", slug="other")
    Membership.objects.create(team=other, user=erin, role="admin")
    body = {"name": "escape"} if target == "personal" else {"name": "escape", "team": "other"}

    response = key_client(erin, for_team=team).post("/api/v1/api-keys/", body, format="json")

    assert response.status_code in (400, 403), response.content[:300]
    assert not ApiKey.objects.filter(name="escape").exists()


def test_a_removed_members_team_key_is_dead_everywhere(team, erin):
    """Found by this review (fixed in c708148): after erin is removed from acme, her key made
    for acme is refused on acme's objects (403), but it still authenticates as erin on the
    personal endpoints: it adds SSH keys (which open erin's own instances and those of her
    other teams) and mints new keys for her own account. A key whose team membership is gone
    should be dead."""
    client = key_client(erin, for_team=team)
    services.member_remove(
        membership=Membership.objects.get(team=team, user=erin), actor=team_owner(team)
    )

    ssh = client.post("/api/v1/ssh-keys/", {"name": "x", "public_key": _ssh_line()}, format="json")
    minted = client.post("/api/v1/api-keys/", {"name": "after removal"}, format="json")

    assert ssh.status_code in (401, 403), ssh.content[:300]
    assert minted.status_code in (401, 403), minted.content[:300]
    assert not SSHKey.objects.filter(user=erin).exists()


def team_owner(team):
    return Membership.objects.get(team=team, role="owner").user


def test_a_read_only_key_cannot_change_who_is_in_the_team(team, alice, erin):
    """Found by this review (fixed in c708148): the teams API was scope area "account", which
    any scope may change: a key with only the read scope (a dashboard's, a monitoring job's)
    of an owner can invite anyone as owner or promote a member to owner: whoever holds a
    leaked read key takes the team, its balance and its billing."""
    reader = key_client(alice, scopes=["read"])
    erin_row = Membership.objects.get(team=team, user=erin)

    invited = reader.post(
        "/api/v1/teams/acme/invitations/",
        {"email": "mallory@example.com", "role": "owner"},
        format="json",
    )
    promoted = reader.patch(
        f"/api/v1/teams/acme/members/{erin_row.pk}/", {"role": "owner"}, format="json"
    )

    assert invited.status_code == 403, invited.content[:300]
    assert promoted.status_code == 403, promoted.content[:300]
    assert not Invitation.objects.filter(email="mallory@example.com").exists()
    assert Membership.objects.get(pk=erin_row.pk).role == "member"


def test_a_read_only_key_still_reads_the_team(team, alice):
    reader = key_client(alice, scopes=["read"])
    assert reader.get("/api/v1/teams/acme/members/").status_code == 200


def test_two_members_sending_the_same_idempotency_key_each_get_their_own_answer(
    team, dave, erin, a100, image, node, sent
):
    """Idempotency keys are stored per person: one member's cached answer is never replayed
    to another member acting for the same team."""
    headers = {"HTTP_IDEMPOTENCY_KEY": "same-key"}
    first = key_client(dave, for_team=team).post(
        "/api/v1/instances/", LAUNCH, format="json", **headers
    )
    second = key_client(erin, for_team=team).post(
        "/api/v1/instances/", LAUNCH, format="json", **headers
    )
    assert first.status_code == second.status_code == 201
    assert "Idempotent-Replayed" not in second
    assert first.json()["id"] != second.json()["id"]
    assert Instance.objects.filter(user=team.account).count() == 2


def test_a_removed_member_gets_no_replay_of_a_cached_team_answer(
    team, erin, a100, image, node, sent
):
    """The role check comes before the replay: a key whose member left gets 403, not the
    stored body of the launch it made while a member."""
    client = key_client(erin, for_team=team)
    headers = {"HTTP_IDEMPOTENCY_KEY": "launch-once"}
    assert client.post("/api/v1/instances/", LAUNCH, format="json", **headers).status_code == 201
    Membership.objects.filter(team=team, user=erin).delete()
    again = client.post("/api/v1/instances/", LAUNCH, format="json", **headers)
    assert again.status_code == 403 and "Idempotent-Replayed" not in again


def test_a_demoted_member_gets_no_replay_of_a_stop(team, erin, a100, image, node, sent):
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")
    client = key_client(erin, for_team=team)
    headers = {"HTTP_IDEMPOTENCY_KEY": "stop-once"}
    url = f"/api/v1/instances/{instance.pk}/stop/"
    assert client.post(url, **headers).status_code == 200
    Membership.objects.filter(team=team, user=erin).update(role="viewer")
    assert client.post(url, **headers).status_code == 403


def test_a_team_key_cannot_be_made_for_the_team_account_nor_used_by_an_outsider(team, bob):
    refused = key_client(bob).post(
        "/api/v1/api-keys/", {"name": "x", "team": "acme"}, format="json"
    )
    assert refused.status_code == 400
    with pytest.raises(ApiKeyRefused, match="team account"):
        key_client(team.account)


def test_a_switched_off_team_account_cannot_be_acted_for(team, erin, a100, image, node, sent):
    """Found by this review (fixed in 42e9aa9), a gap: the operator switches an account off
    with is_active=False (the gateway and SSH then refuse its instances). A person switched
    off cannot log in at all; a team account never logs in, so switching it off stops
    nothing: its members still launch (and are charged to it), book and top up through their
    team keys and the console's switcher, because neither bind_team nor the middleware looks
    at team.account.is_active."""
    team.account.is_active = False
    team.account.save(update_fields=["is_active"])

    launched = key_client(erin, for_team=team).post("/api/v1/instances/", LAUNCH, format="json")

    assert launched.status_code in (401, 403), launched.content[:300]
    assert not Instance.objects.filter(user=team.account).exists()
