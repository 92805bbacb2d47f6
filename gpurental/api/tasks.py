"""Periodic API housekeeping."""

from gpurental.api.idempotency import idempotency_keys_purge
from gpurental.celery_app import app


@app.task(name="gpurental.api.tasks.idempotency_keys_purge", time_limit=120, soft_time_limit=100)
def purge_idempotency_keys() -> int:
    return idempotency_keys_purge()
