"""Instances that come back. An ``auto_recover`` instance whose host is declared lost
(``instance_mark_lost``) is relaunched on another host: the same image, plan and name,
its /workspace from its newest workspace snapshot (else the snapshot it started from,
else empty), billed from when the new one runs. The lost one stays ``lost`` with its
files on the old host, which may still return; the two are linked (``recovered_from``,
unique: an instance is recovered once) and both timelines say what happened.

Without ``auto_recover`` nothing changes: the instance waits, ``lost``, for its host.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.fleet.models import Zone
from gpurental.notifications.services import notify
from gpurental.rentals.exceptions import InvalidTransition, NoCapacity, RentalError
from gpurental.rentals.models import Instance
from gpurental.rentals.models import InstanceStatus as S
from gpurental.rentals.services.lifecycle.base import _lock, instance_notice
from gpurental.rentals.services.lifecycle.customer import instance_launch
from gpurental.volumes.models import Snapshot, SnapshotStatus

log = logging.getLogger(__name__)


def instance_set_auto_recover(
    *, instance: Instance, enabled: bool, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """Turn auto-recover on or off (a notice records who). Only on-demand instances: a
    reservation or a lease is bound to its hosts, and a group replaces its own replicas."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance)
        if enabled and not instance.is_on_demand:
            raise RentalError(
                _(
                    "only on-demand instances can be relaunched elsewhere: a reservation or a "
                    "dedicated host is bound to its hosts, and an elastic group replaces its "
                    "own replicas"
                ),
                field="auto_recover",
            )
        if instance.status in (S.TERMINATING, S.TERMINATED):
            raise InvalidTransition(
                _("instance %(instance)s is %(status)s: nothing to recover")
                % {"instance": instance, "status": instance.status},
                field="status",
            )
        if instance.auto_recover == enabled:
            return instance
        instance.auto_recover = enabled
        instance.save(update_fields=["auto_recover"])
        who = f" by {actor}" if actor is not None and actor.pk else ""
        reason = (
            f"auto-recover on{who}: if its host is lost, it is relaunched on another host from "
            "its newest workspace snapshot"
            if enabled
            else f"auto-recover off{who}: if its host is lost, it waits for that host"
        )
        instance_notice(instance, reason=reason, step="auto_recover", now=now, enabled=enabled)
    return instance


def recovery_snapshot(instance: Instance) -> Snapshot | None:
    """The newest ready snapshot of its /workspace, else the one it started from."""
    newest = (
        Snapshot.objects.filter(instance=instance, status=SnapshotStatus.READY)
        .order_by("-ready_at", "-created_at")
        .first()
    )
    if newest is not None:
        return newest
    start = instance.workspace_from
    return start if start is not None and start.status == SnapshotStatus.READY else None


def recovery_zones(instance: Instance) -> list[Zone | None]:
    """Where a lost instance is relaunched, in order: its zone, then the other zones of its
    region (a zone's outage is what loses hosts together); anywhere if it named no zone."""
    if instance.zone_id is None:
        return [None]
    others = Zone.objects.filter(region=instance.zone.region).exclude(pk=instance.zone_id)
    return [instance.zone, *others.order_by("name")]


def _relaunch(instance: Instance, snapshot: Snapshot | None, now: datetime) -> Instance:
    zones = recovery_zones(instance)
    for tried, zone in enumerate(zones, start=1):
        try:
            return instance_launch(
                user=instance.user,
                image=instance.image,
                plan=instance.plan,
                name=instance.name,
                image_alias=instance.image_alias,
                image_ref=instance.image_ref,
                hf_model=instance.hf_model,
                workspace_from=snapshot,
                idle_stop_minutes=instance.idle_stop_minutes,
                auto_recover=True,
                zone=zone,
                now=now,
            )
        except NoCapacity:  # rolled back (a savepoint): the next zone of the region
            if tried == len(zones):
                raise
    raise AssertionError("unreachable: recovery_zones is never empty")


def instance_recover(*, instance_id, now: datetime | None = None) -> Instance | None:
    """Relaunch a lost ``auto_recover`` instance elsewhere; the new instance, or None when
    there is nothing to do or it cannot be done (then the lost one's timeline and the
    customer are told why: no capacity, quota, credit, volumes on the lost host)."""
    now = now or timezone.now()
    instance = Instance.objects.select_related("host", "image", "plan", "user").get(pk=instance_id)
    if (
        not instance.auto_recover
        or instance.status != S.LOST
        or Instance.objects.filter(recovered_from=instance).exists()
    ):
        return None
    lost_host = instance.host.name if instance.host else "?"
    snapshot = recovery_snapshot(instance)
    try:
        if instance.volumes.exists():
            raise RentalError(
                _("its volumes are on host %(host)s: it waits for that host to return")
                % {"host": lost_host},
                field="volumes",
            )
        with transaction.atomic():
            new = _relaunch(instance, snapshot, now)
            Instance.objects.filter(pk=new.pk).update(recovered_from=instance)
            source = (
                f"/workspace from snapshot {snapshot.name} ({snapshot.ready_at:%Y-%m-%d %H:%M} UTC)"
                if snapshot is not None
                else "an empty /workspace (it has no workspace snapshot)"
            )
            instance_notice(
                instance,
                reason=f"host {lost_host} is lost: relaunched as {new.pk} on {new.host.name}"
                f"{' in zone ' + new.zone.name if new.zone_id else ''} "
                f"with {source}; this instance's files stay on {lost_host}",
                step="auto_recovered",
                now=now,
                recovered_as=str(new.pk),
            )
            instance_notice(
                new,
                reason=f"relaunched for {instance.pk}, whose host {lost_host} was lost, "
                f"with {source}",
                step="recovered",
                now=now,
                recovered_from=str(instance.pk),
            )
            new.refresh_from_db()
            transaction.on_commit(
                lambda: notify(instance.user, "instance_recovered", instance=new, reason=source)
            )
        return new
    except RentalError as exc:
        why = exc.message
        with transaction.atomic():
            instance_notice(
                instance,
                reason=f"auto-recover failed: {why}",
                step="auto_recover_failed",
                now=now,
            )
            transaction.on_commit(
                lambda: notify(
                    instance.user, "instance_recover_failed", instance=instance, reason=why
                )
            )
        return None
