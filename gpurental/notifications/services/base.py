"""What every part of the notification services uses: links and queueing the tasks."""

from __future__ import annotations

import logging
from urllib.parse import urljoin

from django.conf import settings
from django.db import transaction

log = logging.getLogger("gpurental.notifications.services")


def public_link(path: str) -> str:
    """An absolute link for an e-mail or a webhook body, from the PUBLIC_URL setting."""
    return urljoin(settings.PUBLIC_URL.rstrip("/") + "/", path.lstrip("/"))


def on_commit_task(name: str, pk) -> None:
    transaction.on_commit(lambda: enqueue(name, pk))


def enqueue(name: str, pk, countdown: float = 0) -> None:
    """Queue a task, never failing the caller (a stop or a failure that happened must not
    raise because the broker did not answer): what is not queued, the sweep finds."""
    from gpurental.notifications import tasks

    try:
        getattr(tasks, name).apply_async(args=[str(pk)], countdown=countdown)
    except Exception:
        log.exception("could not queue %s for %s; the sweep will", name, pk)
