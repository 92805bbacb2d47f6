"""The teams API beyond the matrix: create, invitations, leave, and keys for a team."""

import hashlib

from django.core import mail
from rest_framework.test import APIClient

from gpurental.accounts.models import ApiKey
from gpurental.accounts.services import _hash_key
from gpurental.rentals.models import Instance
from gpurental.teams.models import Invitation, Membership
from tests.api.conftest import assert_error
from tests.groups import surfaces
from tests.teams.test_permission_matrix import key_client


def test_create_lists_and_names_the_field_of_a_refusal(alice, bob):
    client = key_client(alice)
    created = client.post("/api/v1/teams/", {"name": "Deep Lab"}, format="json")
    assert created.status_code == 201
    assert created.json() | {"created_at": None} == {
        "slug": "deep-lab",
        "name": "Deep Lab",
        "role": "owner",
        "created_at": None,
    }
    assert [t["slug"] for t in client.get("/api/v1/teams/").json()] == ["deep-lab"]
    taken = key_client(bob).post("/api/v1/teams/", {"name": "X", "slug": "deep-lab"}, format="json")
    assert_error(taken, 400, "invalid", field="slug")
    assert key_client(bob).get("/api/v1/teams/").json() == []
    assert_error(key_client(bob).get("/api/v1/teams/deep-lab/"), 404, "not_found")


def test_invitations_are_listed_and_withdrawn_by_admins_and_the_token_never_shown(
    team, alice, frank
):
    owner = key_client(alice)
    made = owner.post(
        "/api/v1/teams/acme/invitations/",
        {"email": "new@example.com", "role": "member"},
        format="json",
    )
    assert made.status_code == 201 and made.json()["state"] == "pending"
    [message] = mail.outbox
    raw = message.body.split("/teams/invite/")[1].split("/")[0]
    invitation = Invitation.objects.get()
    assert invitation.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    listed = owner.get("/api/v1/teams/acme/invitations/")
    assert (
        raw not in listed.content.decode() and invitation.token_hash not in listed.content.decode()
    )
    url = f"/api/v1/teams/acme/invitations/{invitation.pk}/"
    refused = key_client(frank).delete(url)
    assert_error(refused, 403, "permission_denied")
    assert owner.delete(url).json()["state"] == "revoked"


def test_the_last_owner_cannot_leave_over_the_api(team, alice, erin):
    assert_error(key_client(alice).post("/api/v1/teams/acme/leave/"), 400, "invalid", field="user")
    assert key_client(erin).post("/api/v1/teams/acme/leave/").status_code == 204
    assert not Membership.objects.filter(team=team, user=erin).exists()


def test_a_key_for_a_team_says_so_and_a_team_account_never_authenticates(team, alice):
    client = key_client(alice)
    made = client.post("/api/v1/api-keys/", {"name": "team ci", "team": "acme"}, format="json")
    assert made.status_code == 201 and made.json()["team"] == "acme"
    # Even a key row put on the team account itself by hand is refused.
    ApiKey.objects.create(
        user=team.account, name="forged", prefix="forged01", key_hash=_hash_key("gpr_forged01_x")
    )
    forged = APIClient()
    forged.credentials(HTTP_AUTHORIZATION="Bearer gpr_forged01_x")
    assert_error(forged.get("/api/v1/instances/"), 401, "authentication_failed")


def test_me_says_which_account_a_key_acts_as(team, erin):
    assert key_client(erin).get("/api/v1/me/").json()["team"] is None
    me = key_client(erin, team=team).get("/api/v1/me/").json()
    assert (me["email"], me["team"], me["team_role"]) == ("erin@example.com", "acme", "member")


def test_an_idempotency_key_does_not_replay_across_accounts(
    team, erin, a100, image, node, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    body = {"gpu_model": "A100", "gpu_count": 1, "image": "jupyter-cpu"}
    headers = {"HTTP_IDEMPOTENCY_KEY": "launch-1"}
    own = key_client(erin).post("/api/v1/instances/", body, format="json", **headers)
    again = key_client(erin).post("/api/v1/instances/", body, format="json", **headers)
    assert own.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == own.json()["id"]
    as_team = key_client(erin, team=team).post("/api/v1/instances/", body, format="json", **headers)
    assert as_team.status_code == 422  # the key was used for another account's request
    assert Instance.objects.filter(user=team.account).count() == 0


# The groups tests' catalogue: an A10 plan and a serving image.
a10, serving_echo, group_catalog = surfaces.a10, surfaces.serving_echo, surfaces.group_catalog


def test_a_viewer_may_price_a_group_but_not_apply_it(team, frank, a10, group_catalog):
    client = key_client(frank, team=team)
    quoted = client.post("/api/v1/groups/quote/", surfaces.SPEC, format="json")
    assert quoted.status_code == 200, quoted.content[:300]
    applied = client.post("/api/v1/groups/apply/", surfaces.SPEC, format="json")
    assert_error(applied, 403, "permission_denied")
    assert "member role" in applied.json()["error"]["message"]
