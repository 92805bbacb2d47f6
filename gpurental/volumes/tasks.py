"""The control worker's side of volume snapshots: hosts' reports (snapshots.py)."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.hostlink import MessageRefused
from gpurental.volumes.snapshots import transfers_expire, volume_report_receive

log = logging.getLogger(__name__)


@app.task(name=protocol.VOLUME_REPORT, time_limit=60, soft_time_limit=50)
def volume_report(**message) -> None:
    """A host's report on a snapshot or a restore."""
    try:
        volume_report_receive(message=message, now=timezone.now())
    except MessageRefused as exc:
        log.warning("%s", exc)


@app.task(name="gpurental.volumes.tasks.transfers_expire", time_limit=300, soft_time_limit=270)
def expire_transfers() -> dict[str, int]:
    """Snapshots and restores that can no longer finish fail, with the reason."""
    return transfers_expire(now=timezone.now())
