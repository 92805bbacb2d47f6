"""The backend itself: see the package's docstring."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db.backends.postgresql import base

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.1
LONGEST_PAUSE_S = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        deadline = time.monotonic() + getattr(settings, "DATABASE_CONNECT_RETRY_S", 0)
        pause = FIRST_PAUSE_S
        while True:
            try:
                return super().get_new_connection(conn_params)
            except base.Database.OperationalError as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("no writable PostgreSQL yet (%s); trying again in %.1f s", exc, pause)
                time.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE_S)
