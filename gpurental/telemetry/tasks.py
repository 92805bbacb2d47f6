"""Control-queue telemetry tasks: agents' rollup batches, maintenance, the idle policy."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.hostlink import MessageRefused, receive
from gpurental.telemetry.services import (
    idle_instances_check,
    rollups_record,
    telemetry_maintain,
)

log = logging.getLogger(__name__)


@app.task(name=protocol.TELEMETRY, time_limit=60, soft_time_limit=50)
def telemetry_record(**message) -> None:
    """A host's finished per-minute GPU aggregates, signed by that host's agent."""
    now = timezone.now()
    try:
        host, batch = receive(message=message, what="telemetry", now=now)
    except MessageRefused as exc:
        log.warning("%s", exc)
        return
    rollups_record(
        host=host,
        minutes=list(batch.get("minutes") or []),
        simulated=bool(batch.get("simulated")),
        now=now,
    )


@app.task(name="gpurental.telemetry.tasks.maintain", time_limit=600, soft_time_limit=540)
def maintain() -> None:
    """Hourly: the next days' partitions, the last hours' rollups, the retention."""
    log.info("telemetry maintenance: %s", telemetry_maintain(now=timezone.now()))


@app.task(name="gpurental.telemetry.tasks.idle_check", time_limit=120, soft_time_limit=100)
def idle_check() -> None:
    outcomes = idle_instances_check(now=timezone.now())
    if outcomes:
        log.info("idle policy: %s", outcomes)
