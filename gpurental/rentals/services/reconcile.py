"""Reconciliation: make the database agree with what hosts actually run.

- From each heartbeat: a running instance whose container is gone or exited has
  failed; a labelled container the platform no longer wants is removed.
- Periodically: hosts without a heartbeat go offline and their instances are lost
  (time after the last heartbeat is never billed); launches, stops and removals
  that never finished are settled.
Decisions take only instances whose state is older than the observation, so a
heartbeat taken just before a transition cannot undo it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from gpurental.accounts.services import audit_record
from gpurental.fleet.models import Host, HostStatus
from gpurental.rentals import hostcalls
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.selectors import HOLDING
from gpurental.rentals.services import lifecycle
from gpurental.rentals.services.scheduling import gpus_release

log = logging.getLogger(__name__)
S = InstanceStatus
GRACE = timedelta(seconds=2)


def host_containers_reconcile(
    *, host: Host, containers: dict[str, str], observed_at: datetime, now: datetime
) -> None:
    settled_before = observed_at - GRACE
    for instance in Instance.objects.filter(
        host=host, status=S.RUNNING, status_changed_at__lt=settled_before
    ):
        state = containers.get(str(instance.pk))
        if state != "running":
            instance_mark_vanished(instance=instance, state=state, now=now)

    rows = Instance.objects.filter(pk__in=_uuids(containers)).values_list(
        "pk", "status", "status_changed_at"
    )
    known = {str(pk): (status, changed) for pk, status, changed in rows}
    for instance_id, state in containers.items():
        status, changed = known.get(instance_id, (None, None))
        if changed is not None and changed >= settled_before:
            continue  # a transition is under way; the next heartbeat decides
        if status is None or status in (S.TERMINATED, S.LOST):
            log.info(
                "host %s: removing orphan %s (%s)",
                host.name,
                instance_id,
                status or "unknown instance",
            )
            hostcalls.remove_id(host, instance_id)
        elif status in (S.STOPPED, S.FAILED) and state != "stopped":
            log.info(
                "host %s: stopping leftover container of %s instance %s",
                host.name,
                status,
                instance_id,
            )
            hostcalls.stop_id(host, instance_id)


def _uuids(containers: dict[str, str]) -> list[str]:
    valid = []
    for key in containers:
        try:
            valid.append(str(uuid.UUID(key)))
        except ValueError:
            continue
    return valid


def instance_mark_vanished(*, instance: Instance, state: str | None, now: datetime) -> None:
    # "stopped": the runtime still has the workspace, but no container runs.
    what = "disappeared" if state in (None, "stopped", "removing") else f"is {state}"
    with transaction.atomic():
        instance = lifecycle._lock(instance)
        if instance.status != S.RUNNING:
            return
        lifecycle._move(
            instance,
            S.FAILED,
            reason=f"the container {what} on host {instance.host.name} (it stopped outside the platform); "
            "/workspace is kept until you terminate the instance",
            now=now,
            stopped_at=now,
        )
        gpus_release(instance=instance, at=now)
        hostcalls.stop(instance)


def hosts_mark_offline(*, now: datetime) -> list[str]:
    """Hosts whose heartbeat is stale: offline, their instances lost, billing cut at the last beat."""
    cutoff = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER)
    # Active hosts go offline; any stale host (draining, maintenance too) loses its instances.
    stale = Host.objects.filter(last_heartbeat_at__lt=cutoff).filter(
        Q(status=HostStatus.ACTIVE) | Q(instances__status__in=HOLDING)
    )
    names = []
    for host in stale.distinct():
        with transaction.atomic():
            host = Host.objects.select_for_update().get(pk=host.pk)
            last = host.last_heartbeat_at or host.created_at
            if host.status == HostStatus.ACTIVE:
                host.status = HostStatus.OFFLINE
                host.save(update_fields=["status"])
                audit_record(
                    action="host.offline", obj=host, changes={"last_heartbeat_at": last.isoformat()}
                )
            for instance in Instance.objects.filter(host=host, status__in=HOLDING):
                instance = lifecycle._lock(instance)
                billing = (
                    {"stopped_at": last}
                    if instance.status in (S.RUNNING, S.STOPPING) and not instance.stopped_at
                    else {}
                )
                lifecycle._move(
                    instance,
                    S.LOST,
                    reason=f"host {host.name} stopped heart-beating at {last:%Y-%m-%d %H:%M:%S} UTC; "
                    "time after that is not billed",
                    now=now,
                    **billing,
                )
                gpus_release(instance=instance, at=last)
        names.append(host.name)
    return names


def stuck_operations_settle(*, now: datetime) -> None:
    launch_cutoff = now - timedelta(seconds=settings.LAUNCH_TIMEOUT)
    for pk in Instance.objects.filter(
        status__in=(S.PENDING, S.PROVISIONING), status_changed_at__lt=launch_cutoff
    ).values_list("pk", flat=True):
        lifecycle.instance_report_failed(
            instance_id=pk,
            reason=f"the launch did not finish within {settings.LAUNCH_TIMEOUT} s (the host agent may have "
            "restarted); try again",
            now=now,
        )
    stop_cutoff = now - timedelta(seconds=settings.STOP_TIMEOUT)
    for pk in Instance.objects.filter(
        status=S.STOPPING, status_changed_at__lt=stop_cutoff
    ).values_list("pk", flat=True):
        lifecycle.instance_report_stopped(instance_id=pk, now=now)
    for pk in Instance.objects.filter(
        status=S.TERMINATING, status_changed_at__lt=stop_cutoff
    ).values_list("pk", flat=True):
        lifecycle.instance_report_removed(instance_id=pk, now=now)


def fleet_reconcile(*, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    hosts_mark_offline(now=now)
    stuck_operations_settle(now=now)
