"""Control-queue tasks about instances: agents' reports and the periodic reconciliation."""

from __future__ import annotations

import logging

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.models import Host
from gpurental.fleet.services import host_token_matches
from gpurental.rentals.models import Instance
from gpurental.rentals.services import lifecycle, reservations
from gpurental.rentals.services.reconcile import fleet_reconcile

log = logging.getLogger(__name__)

REPORTS = {
    "progress": lambda iid, d: lifecycle.instance_report_progress(
        instance_id=iid, step=d.get("step", "info"), message=d.get("message", "")
    ),
    "running": lambda iid, d: lifecycle.instance_report_running(
        instance_id=iid, port=int(d["port"]), container_id=str(d.get("container_id", ""))
    ),
    "failed": lambda iid, d: lifecycle.instance_report_failed(
        instance_id=iid, reason=str(d.get("reason", ""))[:2000]
    ),
    "stopped": lambda iid, d: lifecycle.instance_report_stopped(instance_id=iid),
    "removed": lambda iid, d: lifecycle.instance_report_removed(instance_id=iid),
}


@app.task(
    name=protocol.INSTANCE_REPORT,
    time_limit=30,
    soft_time_limit=25,
)
def instance_report(
    *, host: str, token: str, instance_id: str, kind: str, data=None, sent_at=None
) -> None:
    """An agent's report about one of its instances; only that host's agent may report on it."""
    reporter = Host.objects.filter(name=host).first()
    if reporter is None or not host_token_matches(host=reporter, token=token):
        log.warning("report from %r refused: unknown host or wrong token", host)
        return
    if not Instance.objects.filter(pk=instance_id, host=reporter).exists():
        log.warning("report from %s about instance %s refused: not on that host", host, instance_id)
        return
    handler = REPORTS.get(kind)
    if handler is None:
        log.warning("instance %s: %s report from %s: %s", instance_id, kind, host, data)
        return
    handler(instance_id, data or {})


@app.task(name="gpurental.rentals.tasks.reconcile", time_limit=120, soft_time_limit=100)
def reconcile() -> None:
    fleet_reconcile()


@app.task(name="gpurental.rentals.tasks.reservations_tick", time_limit=120, soft_time_limit=100)
def reservations_tick() -> dict:
    """Launch reservations at their start, warn before their end, stop them at the end."""
    return reservations.reservations_tick()
