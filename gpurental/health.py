"""Health for load balancers and Compose: ``GET /healthz`` (the process is up: it answers
without touching anything else) and ``GET /readyz`` (it can serve: PostgreSQL, Redis and
the broker answer, and every migration is applied). Each answers JSON, 200 or 503; a
failed check says which and why."""

from __future__ import annotations

import kombu
import redis
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

TIMEOUT_S = 1
_migrated = False  # once every migration is applied, it stays so for this process


def _error(exc: BaseException) -> str:
    return f"error: {exc.__class__.__name__}"


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means "down"; say which
        return _error(exc)


def _redis() -> str:
    try:
        redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
        ).ping()
        return "ok"
    except (redis.RedisError, OSError) as exc:
        return _error(exc)


def _broker() -> str:
    try:
        # amqps: the same TLS settings the workers use (the broker's CA, a client certificate).
        ssl = getattr(settings, "CELERY_BROKER_USE_SSL", None) or False
        with kombu.Connection(
            settings.CELERY_BROKER_URL, ssl=ssl, connect_timeout=TIMEOUT_S
        ) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=TIMEOUT_S)
        return "ok"
    except Exception as exc:  # noqa: BLE001 - kombu raises its transports' own errors
        return _error(exc)


def _migrations() -> str:
    global _migrated
    if _migrated:
        return "ok"
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:  # noqa: BLE001
        return _error(exc)
    if pending:
        return f"pending: {len(pending)} (run manage.py migrate)"
    _migrated = True
    return "ok"


@never_cache
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request):
    checks = {"database": _database(), "redis": _redis(), "broker": _broker()}
    checks["migrations"] = _migrations() if checks["database"] == "ok" else "unknown"
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "unready", **checks}, status=200 if ready else 503
    )
