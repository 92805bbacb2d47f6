"""/healthz answers 200 only when PostgreSQL and Redis both answer."""

import shutil
import tempfile
from pathlib import Path

import pytest

from gpurental import embedded


@pytest.mark.django_db
def test_healthz_is_ok_when_database_and_redis_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok"}


@pytest.fixture
def own_redis(settings):
    """A real Redis of this test's own, so stopping it harms no other test."""
    var_dir = Path(tempfile.mkdtemp(prefix="gr-redis-"))
    settings.REDIS_URL = embedded.start_redis(var_dir)
    yield var_dir
    embedded.stop_redis(var_dir)
    shutil.rmtree(var_dir, ignore_errors=True)


@pytest.mark.django_db
def test_healthz_fails_when_redis_goes_down(client, own_redis):
    assert client.get("/healthz").status_code == 200
    embedded.stop_redis(own_redis)
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy"
    assert body["database"] == "ok"
    assert body["redis"].startswith("error:")


@pytest.mark.django_db
def test_healthz_fails_when_database_is_unreachable(client, monkeypatch):
    from django.db import connection

    def refuse(*args, **kwargs):
        raise connection.Database.OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", refuse)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"].startswith("error:")
