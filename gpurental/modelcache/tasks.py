"""Control-queue task of the model cache. Thin: parse, call one service."""

from __future__ import annotations

import logging

from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.hostlink import MessageRefused
from gpurental.modelcache.services import CacheRefused, modelcache_report_receive

log = logging.getLogger(__name__)


@app.task(name=protocol.MODELCACHE_REPORT, time_limit=60, soft_time_limit=50)
def modelcache_report(**message) -> None:
    try:
        modelcache_report_receive(message=message, now=timezone.now())
    except (MessageRefused, CacheRefused) as exc:
        log.warning("%s", exc)
