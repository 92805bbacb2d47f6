"""Rate limits per API key (per user for sessions), counted in Redis."""

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from gpurental.api.throttling import ApiRateThrottle
from tests.api.conftest import assert_error


@pytest.fixture
def fresh_user_counters(alice, bob):
    # User ids restart with each test database, but an external Redis keeps counting.
    cache.delete_many(
        [
            ApiRateThrottle.cache_format % {"scope": "api", "ident": f"user:{user.pk}"}
            for user in (alice, bob)
        ]
    )


@pytest.mark.backend
def test_over_the_rate_is_429_with_retry_after(as_alice, settings):
    settings.API_THROTTLE_RATE = "3/min"
    for _ in range(3):
        assert as_alice.get("/api/v1/me/").status_code == 200
    response = as_alice.get("/api/v1/me/")
    error = assert_error(response, 429, "throttled")
    retry_after = int(response["Retry-After"])
    assert 0 < retry_after <= 60
    assert f"retry in {retry_after} seconds" in error["message"]


@pytest.mark.backend
def test_each_api_key_has_its_own_budget(as_alice, client_for, alice, settings):
    settings.API_THROTTLE_RATE = "2/min"
    other_key = client_for(alice)
    for _ in range(2):
        as_alice.get("/api/v1/me/")
    assert as_alice.get("/api/v1/me/").status_code == 429
    assert other_key.get("/api/v1/me/").status_code == 200


@pytest.mark.backend
def test_sessions_are_limited_per_user(alice, bob, settings, fresh_user_counters):
    settings.API_THROTTLE_RATE = "2/min"
    alices, bobs = APIClient(), APIClient()
    alices.force_login(alice)
    bobs.force_login(bob)
    for _ in range(2):
        assert alices.get("/api/v1/me/").status_code == 200
    assert_error(alices.get("/api/v1/instances/"), 429, "throttled")
    assert bobs.get("/api/v1/me/").status_code == 200


def test_default_rate_comes_from_settings(settings):
    settings.API_THROTTLE_RATE = "7/hour"
    assert (ApiRateThrottle().num_requests, ApiRateThrottle().duration) == (7, 3600)
