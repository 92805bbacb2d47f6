"""Control-queue telemetry tasks: agents' rollup batches, retention, the idle policy."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.models import Host
from gpurental.fleet.services import host_token_matches
from gpurental.telemetry.services import idle_instances_check, rollups_expire, rollups_record

log = logging.getLogger(__name__)


@app.task(name=protocol.TELEMETRY, time_limit=60, soft_time_limit=50)
def telemetry_record(*, host: str, token: str, minutes=(), simulated=False, sent_at=None) -> None:
    """A host's finished per-minute GPU aggregates; only that host's agent may send them."""
    reporter = Host.objects.filter(name=host).first()
    if reporter is None or not host_token_matches(host=reporter, token=token):
        log.warning("telemetry from %r refused: unknown host or wrong token", host)
        return
    rollups_record(
        host=reporter, minutes=list(minutes or []), simulated=bool(simulated), now=timezone.now()
    )


@app.task(name="gpurental.telemetry.tasks.rollups_expire", time_limit=600, soft_time_limit=540)
def expire_rollups() -> None:
    deleted = rollups_expire(now=timezone.now())
    if deleted:
        log.info("deleted %d GPU rollups past their retention", deleted)


@app.task(name="gpurental.telemetry.tasks.idle_check", time_limit=120, soft_time_limit=100)
def idle_check() -> None:
    outcomes = idle_instances_check(now=timezone.now())
    if outcomes:
        log.info("idle policy: %s", outcomes)
