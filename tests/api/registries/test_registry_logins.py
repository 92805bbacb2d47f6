"""Registry logins: saved once per account, the password encrypted and never shown again,
each change audited, a team's changed only by its admins."""

from __future__ import annotations

import pytest

from gpurental.accounts.models import AuditEvent
from gpurental.images.models import RegistryCredential
from gpurental.images.selectors import registry_auth
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db
URL = "/api/v1/registry-logins/"


def test_a_login_is_saved_encrypted_and_its_password_never_comes_back(as_alice, alice):
    response = as_alice.post(
        URL,
        {"registry": "HTTPS://GHCR.IO/", "username": "alice", "password": "tok-3141"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["registry"] == "ghcr.io" and body["username"] == "alice"
    assert "password" not in body and "tok-3141" not in response.content.decode()
    assert "tok-3141" not in as_alice.get(URL).content.decode()

    stored = RegistryCredential.objects.get(account=alice)
    assert "tok-3141" not in stored.password_encrypted
    assert registry_auth(account_id=alice.pk, registry="ghcr.io") == {
        "username": "alice",
        "password": "tok-3141",
        "serveraddress": "ghcr.io",
    }
    assert registry_auth(account_id=alice.pk, registry="docker.io") is None
    row = AuditEvent.objects.get(action="registry_credential.saved")
    assert row.actor == alice and "tok-3141" not in str(row.changes)


def test_saving_again_for_the_same_registry_replaces_the_login(as_alice, alice):
    for password in ("first", "second"):
        response = as_alice.post(
            URL, {"registry": "ghcr.io", "username": "a", "password": password}, format="json"
        )
        assert response.status_code == 201
    assert RegistryCredential.objects.filter(account=alice).count() == 1
    assert registry_auth(account_id=alice.pk, registry="GHCR.io")["password"] == "second"
    assert AuditEvent.objects.filter(action="registry_credential.replaced").count() == 1


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"registry": "not a host", "username": "a", "password": "p"}, "registry", "host name"),
        ({"registry": "ghcr.io", "username": "a"}, "password", "required"),
        ({"registry": "ghcr.io", "password": "p"}, "username", "required"),
    ],
)
def test_a_bad_login_is_a_400_naming_the_field(as_alice, body, field, says):
    error = assert_error(as_alice.post(URL, body, format="json"), 400, "invalid", field=field)
    assert says in error["message"]
    assert not RegistryCredential.objects.exists()


def test_deleting_a_login_is_audited_and_it_is_gone(as_alice, alice):
    login = as_alice.post(
        URL, {"registry": "ghcr.io", "username": "a", "password": "p"}, format="json"
    ).json()
    assert as_alice.delete(f"{URL}{login['id']}/").status_code == 204
    assert registry_auth(account_id=alice.pk, registry="ghcr.io") is None
    assert AuditEvent.objects.filter(action="registry_credential.deleted").exists()


def test_a_team_s_logins_are_the_team_s_and_only_its_admins_change_them(alice, bob):
    from rest_framework.test import APIClient

    from gpurental.accounts.services import api_key_create
    from gpurental.teams.models import Membership
    from gpurental.teams.services import team_create

    team = team_create(creator=alice, name="Lab")
    Membership.objects.create(team=team, user=bob, role="member")

    def acting_for_team(user) -> APIClient:
        client = APIClient()
        client.credentials(
            HTTP_AUTHORIZATION=f"Bearer {api_key_create(user=user, name='t', team=team)[1]}"
        )
        return client

    saved = acting_for_team(alice).post(
        URL, {"registry": "ghcr.io", "username": "lab", "password": "p"}, format="json"
    )
    assert saved.status_code == 201, saved.content
    assert registry_auth(account_id=team.account.pk, registry="ghcr.io")["username"] == "lab"
    assert registry_auth(account_id=alice.pk, registry="ghcr.io") is None

    as_member = acting_for_team(bob)
    assert [row["username"] for row in as_member.get(URL).json()["results"]] == ["lab"]
    refused = as_member.post(
        URL, {"registry": "ghcr.io", "username": "bob", "password": "x"}, format="json"
    )
    assert refused.status_code == 403, refused.content
    assert registry_auth(account_id=team.account.pk, registry="ghcr.io")["username"] == "lab"
