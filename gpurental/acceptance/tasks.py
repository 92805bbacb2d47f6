"""Control-queue tasks of host acceptance. Thin: parse, call one service."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.acceptance.services import (
    MessageRefused,
    acceptance_report_receive,
    acceptance_runs_expire,
)
from gpurental.celery_app import app

log = logging.getLogger(__name__)


@app.task(name=protocol.ACCEPTANCE_REPORT, time_limit=60, soft_time_limit=50)
def acceptance_report(**message) -> None:
    try:
        acceptance_report_receive(message=message, now=timezone.now())
    except MessageRefused as exc:
        log.warning("%s", exc)


@app.task(
    name="gpurental.acceptance.tasks.acceptance_runs_expire", time_limit=60, soft_time_limit=50
)
def expire_runs() -> None:
    acceptance_runs_expire(now=timezone.now())
