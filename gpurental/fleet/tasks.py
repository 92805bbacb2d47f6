"""Control-queue tasks about hosts. Thin: parse, call one service."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental.celery_app import app
from gpurental.fleet.services import HeartbeatRefused, host_heartbeat_record

log = logging.getLogger(__name__)


@app.task(name="gpurental.fleet.tasks.host_heartbeat", time_limit=30, soft_time_limit=25)
def host_heartbeat(
    *,
    host: str,
    token: str,
    inventory=(),
    containers=None,
    runtime="",
    gpu_source="",
    agent_version="",
    sent_at=None,
) -> None:
    try:
        host_heartbeat_record(
            name=host,
            token=token,
            inventory=list(inventory),
            containers=dict(containers or {}),
            runtime=runtime,
            gpu_source=gpu_source,
            agent_version=agent_version,
            sent_at=sent_at,
            now=timezone.now(),
        )
    except HeartbeatRefused as exc:
        log.warning("%s", exc)
