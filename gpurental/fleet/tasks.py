"""Control-queue tasks about hosts. Thin: parse, call one service."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.services import HeartbeatRefused, host_heartbeat_record

log = logging.getLogger(__name__)


@app.task(name=protocol.HEARTBEAT, time_limit=30, soft_time_limit=25)
def host_heartbeat(
    *,
    host: str,
    token: str,
    inventory=None,
    containers=None,
    containers_listed_at=None,
    runtime="",
    gpu_source="",
    agent_version="",
    sent_at=None,
) -> None:
    try:
        host_heartbeat_record(
            name=host,
            token=token,
            inventory=None if inventory is None else list(inventory),
            containers=None if containers is None else dict(containers),
            containers_listed_at=containers_listed_at,
            runtime=runtime,
            gpu_source=gpu_source,
            agent_version=agent_version,
            sent_at=sent_at,
            now=timezone.now(),
        )
    except HeartbeatRefused as exc:
        log.warning("%s", exc)
