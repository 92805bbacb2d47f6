"""API keys (shown once, revoked not deleted) and me/."""

from decimal import Decimal

from rest_framework.test import APIClient

from gpurental.accounts.models import ApiKey, AuditEvent
from gpurental.billing.services import credit_add
from tests.api.conftest import assert_error

KEYS = "/api/v1/api-keys/"


def test_create_shows_the_key_once_and_it_works(as_alice, alice):
    response = as_alice.post(KEYS, {"name": "ci runner"})
    assert response.status_code == 201
    data = response.json()
    assert set(data) == {
        "id",
        "name",
        "prefix",
        "scopes",
        "expires_at",
        "created_at",
        "last_used_at",
        "revoked_at",
        "team",
        "key",
    }
    assert data["team"] is None  # a key of one's own account
    assert data["scopes"] == ["account", "billing", "instances", "read", "reservations"]
    assert data["name"] == "ci runner" and data["key"].startswith(f"gpr_{data['prefix']}_")
    assert data["revoked_at"] is None and data["last_used_at"] is None

    listed = as_alice.get(KEYS).json()["results"]
    assert {k["name"] for k in listed} == {"tests", "ci runner"}
    assert all("key" not in k and "key_hash" not in k for k in listed)
    assert "key" not in as_alice.get(f"{KEYS}{data['id']}/").json()
    assert data["key"] not in as_alice.get(KEYS).content.decode()

    fresh = APIClient()
    fresh.credentials(HTTP_AUTHORIZATION=f"Bearer {data['key']}")
    assert fresh.get("/api/v1/me/").json()["email"] == alice.email


def test_create_without_a_name(as_alice):
    assert as_alice.post(KEYS, {}).json()["name"] == "default"


def test_key_name_is_checked(as_alice):
    assert_error(as_alice.post(KEYS, {"name": "n" * 101}), 400, "invalid", field="name")


def test_delete_revokes_keeps_the_row_and_audits(as_alice, alice, client_for):
    other = client_for(alice)
    response = as_alice.delete(f"{KEYS}{other.api_key.pk}/")
    assert response.status_code == 204 and not response.content
    key = ApiKey.objects.get(pk=other.api_key.pk)
    assert key.revoked_at is not None
    listed = {k["id"]: k for k in as_alice.get(KEYS).json()["results"]}
    assert listed[str(key.pk)]["revoked_at"] is not None
    assert AuditEvent.objects.filter(
        action="api_key.revoke", object_id=str(key.pk), actor=alice
    ).exists()
    assert_error(other.get("/api/v1/me/"), 401, "authentication_failed")
    # Revoking again changes nothing and is not an error.
    assert as_alice.delete(f"{KEYS}{key.pk}/").status_code == 204
    assert AuditEvent.objects.filter(action="api_key.revoke", object_id=str(key.pk)).count() == 1


def test_a_key_can_revoke_itself(as_alice):
    assert as_alice.delete(f"{KEYS}{as_alice.api_key.pk}/").status_code == 204
    assert_error(as_alice.get(KEYS), 401, "authentication_failed")


def test_me(as_alice, alice, running, settings):
    settings.BILLING_CURRENCY = "USD"
    credit_add(user=alice, amount=Decimal("25.125"))
    alice.credit_limit = Decimal("10.00")
    alice.save()
    response = as_alice.get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json() == {
        "email": "alice@example.com",
        "full_name": "Alice Owner",
        "balance": "25.13",
        "currency": "USD",
        "gpu_quota": 8,
        "gpus_in_use": 1,
        "credit_limit": "10.00",
        # 35.125 to spend at 2.20/h: under BILLING_LOW_BALANCE_HOURS (24) left.
        "hourly_burn": "2.2000",
        "hours_left": "16.0",
        "low_balance": True,
        "is_staff": False,
        "team": None,  # a key of her own account
        "team_role": None,
    }


def test_me_for_staff(as_carol):
    data = as_carol.get("/api/v1/me/").json()
    assert data["is_staff"] is True and data["balance"] == "0.00" and data["gpus_in_use"] == 0


def test_session_login_works_for_the_console(alice, db):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get("/api/v1/me/").status_code == 200
    # A session POST without the CSRF token is refused, in the error shape.
    assert_error(client.post(KEYS, {"name": "x"}), 403, "permission_denied")
