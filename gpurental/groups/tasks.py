"""The autoscaler's control jobs (queue ``control``).

``groups_tick`` runs every GROUP_TICK_S (celery beat) and looks at every live group;
``group_tick`` looks at one at once: the gateway sends it when a request waits at zero
replicas, so a scale from zero does not wait for the next round.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from gpurental.celery_app import app
from gpurental.groups.models import Group, LoadSample
from gpurental.groups.services import group_tick as tick

log = logging.getLogger(__name__)

GROUP_TICK = "gpurental.groups.tasks.group_tick"
GROUPS_TICK = "gpurental.groups.tasks.groups_tick"


@app.task(name=GROUP_TICK, time_limit=60, soft_time_limit=50, ignore_result=True)
def group_tick(group_id: str) -> None:
    tick(group_id=group_id)


# Pre-warm looks 7 days back; samples older than this are of no further use.
SAMPLES_KEPT = timedelta(days=8)


@app.task(name=GROUPS_TICK, time_limit=120, soft_time_limit=110, ignore_result=True)
def groups_tick() -> None:
    now = timezone.now()
    LoadSample.objects.filter(at__lt=now - SAMPLES_KEPT).delete()
    live = Group.objects.exclude(status=Group.Status.DELETED).values_list("pk", flat=True)
    for group_id in live:
        try:
            tick(group_id=group_id, now=now)
        except Exception:  # noqa: BLE001 - one group's trouble must not stop the others
            log.exception("the autoscaler failed on group %s", group_id)
