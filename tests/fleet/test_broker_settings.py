"""The broker outside DEBUG: never the cache's Redis that hosts would be handed (issue 29)."""

import pytest

from tests.test_settings import _load_settings as load_settings

pytestmark = pytest.mark.slow  # a Django process per setting


def _load_settings(**env):
    """Settings with DEBUG off, a real secret key, no broker set and no local-only opt-out."""
    defaults = {"SECRET_KEY": "x" * 50, "DEBUG": "0", "CELERY_BROKER_URL": ""}
    local_only = {"ALLOW_BROKER_ON_CACHE": "0", "CHANNEL_LAYER_URL": ""}
    return load_settings(**{**defaults, **local_only, **env})


def test_debug_off_refuses_the_caches_redis_as_the_broker():
    result = _load_settings(REDIS_URL="redis://cache.internal:6379/0")
    assert result.returncode != 0
    assert "CELERY_BROKER_URL is the cache's Redis (cache.internal:6379)" in result.stderr
    assert "refusing to start" in result.stderr and "amqps://" in result.stderr
    same_server = _load_settings(
        REDIS_URL="redis://cache.internal:6379/0",
        CELERY_BROKER_URL="redis://cache.internal:6379/5",  # another database, same server
    )
    assert same_server.returncode != 0 and "cache's Redis" in same_server.stderr


def test_debug_off_starts_with_a_broker_of_its_own():
    for broker in ("amqps://gpurental:pw@broker.internal:5671//", "redis://broker.internal:6379/0"):
        result = _load_settings(REDIS_URL="redis://cache.internal:6379/0", CELERY_BROKER_URL=broker)
        assert result.returncode == 0, result.stderr
    # A unix socket reaches no remote host (the single box, the tests).
    result = _load_settings(REDIS_URL="unix:///tmp/gpurental-redis.sock")
    assert result.returncode == 0, result.stderr
