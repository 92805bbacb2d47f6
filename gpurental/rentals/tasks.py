"""Control-queue tasks about instances: agents' reports and the periodic reconciliation."""

from __future__ import annotations

import logging
import uuid

from django.db import InterfaceError, OperationalError
from django.utils import timezone

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.fleet.hostlink import MessageRefused, receive, refuse_message
from gpurental.rentals.models import Instance
from gpurental.rentals.services import lifecycle, reservations, saving
from gpurental.rentals.services.reconcile import reconcile_pass
from gpurental.rentals.services.saving import image_report_receive

log = logging.getLogger(__name__)

REPORTS = {
    "progress": lambda iid, d: lifecycle.instance_report_progress(
        instance_id=iid,
        step=d.get("step", "info"),
        message=d.get("message", ""),
        data=_pull_progress(d.get("pull")),
    ),
    "running": lambda iid, d: lifecycle.instance_report_running(
        instance_id=iid,
        port=int(d["port"]),
        container_id=str(d.get("container_id", "")),
        ready_s=_seconds_or_none(d.get("ready_s")),
        ports=_ports(d.get("ports")),
    ),
    "failed": lambda iid, d: lifecycle.instance_report_failed(
        instance_id=iid, reason=str(d.get("reason", ""))[:2000]
    ),
    "stopped": lambda iid, d: lifecycle.instance_report_stopped(instance_id=iid),
    "removed": lambda iid, d: lifecycle.instance_report_removed(instance_id=iid),
}


def _ports(value) -> dict[str, int]:
    """{container port: host port}, keeping only pairs of valid port numbers."""
    if not isinstance(value, dict):
        return {}
    ports = {}
    for inside, outside in value.items():
        try:
            inside, outside = int(inside), int(outside)
        except (TypeError, ValueError):
            continue
        if 1 <= inside <= 65535 and 1 <= outside <= 65535:
            ports[str(inside)] = outside
    return ports


def _pull_progress(value) -> dict:
    """An image pull's figures, each a non-negative number, or nothing."""
    if not isinstance(value, dict):
        return {}
    keys = ("layers", "layers_done", "bytes", "total", "percent")
    figures = {k: value[k] for k in keys if isinstance(value.get(k), int | float)}
    return {"pull": figures} if all(v >= 0 for v in figures.values()) and figures else {}


def _seconds_or_none(value) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if 0 <= seconds < 86400 else None


@app.task(
    name=protocol.INSTANCE_REPORT,
    time_limit=30,
    soft_time_limit=25,
    # The agent sends each report once: a database that is restarting must not lose it (a
    # launch would never become running). Handling one again changes nothing.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=False,
    max_retries=8,  # about two minutes
)
def instance_report(**message) -> None:
    """An agent's report about one of its instances: signed by that host, and about an
    instance on that host; anything else is refused and audited. Retried while the
    database cannot be reached."""
    now = timezone.now()
    try:
        host, report = receive(message=message, what="report", now=now)
        instance_id, kind = str(report.get("instance_id", "")), report.get("kind")
        if not Instance.objects.filter(pk=_uuid_or_none(instance_id), host=host).exists():
            refuse_message(
                name=host.name,
                what="report",
                why=f"instance {instance_id[:64]!r} is not on this host",
                now=now,
            )
    except MessageRefused as exc:
        log.warning("%s", exc)
        return
    handler = REPORTS.get(kind)
    if handler is None:
        log.warning("instance %s: %s report from %s: %s", instance_id, kind, host.name, report)
        return
    handler(instance_id, report.get("data") or {})


def _uuid_or_none(value: str):
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


@app.task(name="gpurental.rentals.tasks.instances_notify", time_limit=300, soft_time_limit=280)
def instances_notify(event: str, instance_ids: list[str]) -> int:
    """The notifications of a transition made for many instances at once (a reconcile pass
    over a silent rack): made here, off the pass."""
    return lifecycle.instances_notify(event=event, instance_ids=instance_ids)


@app.task(name="gpurental.rentals.tasks.reconcile", time_limit=120, soft_time_limit=100)
def reconcile() -> None:
    reconcile_pass()


@app.task(name="gpurental.rentals.tasks.reservations_tick", time_limit=120, soft_time_limit=100)
def reservations_tick() -> dict:
    """Launch reservations at their start, warn before their end, stop them at the end."""
    return reservations.reservations_tick()


@app.task(name=protocol.IMAGE_REPORT, time_limit=60, soft_time_limit=50)
def image_report(**message) -> None:
    """A host's report on saving an instance as an image (rentals/services/saving.py)."""
    try:
        image_report_receive(message=message, now=timezone.now())
    except MessageRefused as exc:
        log.warning("%s", exc)


@app.task(name="gpurental.rentals.tasks.saved_images_expire", time_limit=120, soft_time_limit=100)
def saved_images_expire() -> int:
    """Saves as image that can no longer finish fail, with the reason."""
    return saving.saved_images_expire(now=timezone.now())
