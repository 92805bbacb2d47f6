"""Authentication, and one error shape for every kind of error."""

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from gpurental.accounts.models import ApiKey
from gpurental.accounts.services import api_key_revoke
from tests.api.conftest import assert_error


@pytest.fixture
def anonymous(db):
    return APIClient()


def test_no_credentials_is_401_with_the_error_shape(anonymous):
    response = anonymous.get("/api/v1/instances/")
    error = assert_error(response, 401, "not_authenticated")
    assert "Authorization: Bearer" in error["message"]
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_api_key_authenticates_and_records_its_use(as_alice):
    response = as_alice.get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json()["email"] == "alice@example.com"
    as_alice.api_key.refresh_from_db()
    assert as_alice.api_key.last_used_at is not None


@pytest.mark.parametrize(
    "header",
    ["Bearer gpr_00000000_notarealkey", "Bearer not-even-our-format", "Bearer", "Bearer a b"],
)
def test_wrong_key_is_401(anonymous, alice, header):
    anonymous.credentials(HTTP_AUTHORIZATION=header)
    error = assert_error(anonymous.get("/api/v1/me/"), 401, "authentication_failed")
    assert "Bearer" in error["message"] or "API key" in error["message"]


def test_revoked_key_is_401_like_an_unknown_one(as_alice, alice):
    api_key_revoke(key=as_alice.api_key, actor=alice)
    revoked = assert_error(as_alice.get("/api/v1/me/"), 401, "authentication_failed")
    as_alice.credentials(HTTP_AUTHORIZATION="Bearer gpr_deadbeef_" + "x" * 43)
    unknown = assert_error(as_alice.get("/api/v1/me/"), 401, "authentication_failed")
    assert revoked == unknown


def test_a_bad_key_is_refused_even_with_a_valid_session(client_for, alice):
    client = APIClient()
    client.force_login(alice)
    assert client.get("/api/v1/me/").status_code == 200  # the console's session works
    client.credentials(HTTP_AUTHORIZATION="Bearer gpr_wrong")
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_inactive_users_key_is_refused(as_alice, alice):
    alice.is_active = False
    alice.save()
    assert_error(as_alice.get("/api/v1/me/"), 401, "authentication_failed")


def test_unknown_url_under_api_v1_is_a_json_404(as_alice):
    error = assert_error(as_alice.get("/api/v1/no-such-thing/"), 404, "not_found")
    assert "/api/v1/no-such-thing/" in error["message"]
    assert_error(as_alice.post("/api/v1/nope/deeper/", {}), 404, "not_found")


def test_missing_trailing_slash_is_a_404_that_says_so(as_alice):
    error = assert_error(as_alice.get("/api/v1/instances"), 404, "not_found")
    assert "did you mean /api/v1/instances/" in error["message"]


def test_malformed_instance_id_is_a_404(as_alice):
    assert_error(as_alice.get("/api/v1/instances/not-a-uuid/"), 404, "not_found")
    assert_error(as_alice.post("/api/v1/instances/%00/stop/"), 404, "not_found")
    assert_error(as_alice.get("/api/v1/plans/a%0Ab/"), 404, "not_found")  # found by fuzzing


def test_method_not_allowed_names_the_allowed_ones(as_alice):
    response = as_alice.delete("/api/v1/me/")
    error = assert_error(response, 405, "method_not_allowed")
    assert "DELETE" in error["message"] and "GET" in error["message"]
    assert "GET" in response["Allow"]


def test_body_that_is_not_json_is_a_parse_error(as_alice):
    response = as_alice.post(
        "/api/v1/instances/", data="{not json", content_type="application/json"
    )
    assert_error(response, 400, "parse_error")


def test_unsupported_media_type(as_alice):
    response = as_alice.post("/api/v1/api-keys/", data="name=x", content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type")


def test_validation_errors_name_every_field(as_alice, a100, image):
    response = as_alice.post("/api/v1/instances/", {"gpu_model": "A100", "gpu_count": 0})
    error = assert_error(response, 400, "invalid")
    assert set(error["fields"]) == {"gpu_count", "image"}
    assert "gpu_count: " in error["message"] and "image: " in error["message"]


def test_key_hash_is_never_exposed(as_alice):
    body = as_alice.get("/api/v1/api-keys/").content.decode()
    key = ApiKey.objects.get(pk=as_alice.api_key.pk)
    assert key.key_hash not in body and "key_hash" not in body


def test_last_used_is_touched_at_most_once_a_minute(as_alice):
    as_alice.get("/api/v1/me/")
    first = ApiKey.objects.get(pk=as_alice.api_key.pk).last_used_at
    as_alice.get("/api/v1/me/")
    assert ApiKey.objects.get(pk=as_alice.api_key.pk).last_used_at == first
    assert first <= timezone.now()
