"""Control-queue tasks about hosts. Thin: parse, call one service."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.hostlink import MessageRefused
from gpurental.fleet.services import host_heartbeat_receive

log = logging.getLogger(__name__)


@app.task(name=protocol.HEARTBEAT, time_limit=30, soft_time_limit=25)
def host_heartbeat(**message) -> None:
    try:
        host_heartbeat_receive(message=message, now=timezone.now())
    except MessageRefused as exc:
        log.warning("%s", exc)
