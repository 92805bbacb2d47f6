"""Beat's backup (declared in celery_app's beat schedule)."""

from __future__ import annotations

from django.conf import settings

from gpurental.backups.services import backup_create, backups_prune
from gpurental.celery_app import app


@app.task(name="gpurental.backups.tasks.backup", time_limit=3600, soft_time_limit=3540)
def backup() -> str:
    """A backup now; then only the newest BACKUP_KEEP are kept."""
    dump = backup_create()
    backups_prune(keep=settings.BACKUP_KEEP)
    return str(dump)
