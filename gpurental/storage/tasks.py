"""The storage meter's periodic run (declared in celery_app's beat schedule)."""

from __future__ import annotations

from django.utils import timezone

from gpurental.celery_app import app
from gpurental.storage.arrears import storage_arrears_run
from gpurental.storage.retention import workspaces_retention_run
from gpurental.storage.services import storage_meter_run


@app.task(name="gpurental.storage.tasks.meter", time_limit=600, soft_time_limit=540)
def meter() -> int:
    return storage_meter_run(now=timezone.now())


@app.task(name="gpurental.storage.tasks.retention", time_limit=600, soft_time_limit=540)
def retention() -> dict[str, int]:
    return workspaces_retention_run(now=timezone.now())


@app.task(name="gpurental.storage.tasks.arrears", time_limit=600, soft_time_limit=540)
def arrears() -> dict[str, int]:
    return storage_arrears_run(now=timezone.now())
