"""/healthz answers while the process is up; /readyz only when PostgreSQL, Redis and the
broker answer and every migration is applied, naming what is not."""

import shutil
import tempfile
from pathlib import Path

import pytest

from gpurental import embedded, health

READY = {
    "status": "ready",
    "database": "ok",
    "redis": "ok",
    "broker": "ok",
    "migrations": "ok",
}


@pytest.mark.django_db
def test_both_answer_200_when_everything_answers(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    response = client.get("/readyz")
    assert response.status_code == 200 and response.json() == READY
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db
def test_plain_http_probes_are_not_redirected_to_https(client, settings):
    """Caddy and Compose probe over plain HTTP on the private network, where every other
    path is redirected to https."""
    from gpurental.settings import SECURE_REDIRECT_EXEMPT

    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REDIRECT_EXEMPT = SECURE_REDIRECT_EXEMPT
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/login/").status_code == 301


@pytest.fixture
def own_redis(settings):
    """A real Redis of this test's own (the cache and the broker), so stopping it harms
    no other test."""
    from gpurental.settings import celery_url

    var_dir = Path(tempfile.mkdtemp(prefix="gr-redis-"))
    settings.REDIS_URL = embedded.start_redis(var_dir)
    settings.CELERY_BROKER_URL = celery_url(settings.REDIS_URL)
    yield var_dir
    embedded.stop_redis(var_dir)
    shutil.rmtree(var_dir, ignore_errors=True)


@pytest.mark.django_db
def test_with_redis_down_the_process_is_up_but_not_ready(client, own_redis):
    assert client.get("/readyz").status_code == 200
    embedded.stop_redis(own_redis)
    assert client.get("/healthz").status_code == 200
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unready" and body["database"] == "ok"
    assert body["redis"].startswith("error:") and body["broker"].startswith("error:")


@pytest.mark.django_db
def test_with_the_database_unreachable_it_is_not_ready(client, monkeypatch):
    from django.db import connection

    def refuse(*args, **kwargs):
        raise connection.Database.OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", refuse)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"].startswith("error:") and body["migrations"] == "unknown"


@pytest.mark.django_db
def test_a_pending_migration_is_not_ready(client, monkeypatch):
    monkeypatch.setattr(health, "_migrated", False)
    monkeypatch.setattr(
        "django.db.migrations.executor.MigrationExecutor.migration_plan",
        lambda self, targets: [("a migration", False)],
    )
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["migrations"] == "pending: 1 (run manage.py migrate)"
