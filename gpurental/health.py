"""GET /healthz: 200 only when both PostgreSQL and Redis answer."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _database_ok() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True, "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means "down"; say which
        return False, f"error: {exc.__class__.__name__}"


def _redis_ok() -> tuple[bool, str]:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        client.ping()
        return True, "ok"
    except (redis.RedisError, OSError) as exc:
        return False, f"error: {exc.__class__.__name__}"


@never_cache
@require_GET
def healthz(request):
    db_ok, db_detail = _database_ok()
    redis_ok, redis_detail = _redis_ok()
    healthy = db_ok and redis_ok
    return JsonResponse(
        {"status": "ok" if healthy else "unhealthy", "database": db_detail, "redis": redis_detail},
        status=200 if healthy else 503,
    )
