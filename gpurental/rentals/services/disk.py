"""The plan's ``disk_gb`` on an instance's /workspace, by measured use.

Docker's local volumes on the usual filesystems (ext4, overlay2) take no size limit, so
the agent measures each workspace (``Runtime.workspace_usage``) and the control plane
applies the plan: a notice from ``DISK_WARNING_PERCENT``; over the limit, a notice and
``DISK_GRACE_MINUTES`` to delete files, then a stop (/workspace kept). An instance started
again over its limit gets the same grace, so its owner can always get in to clean up.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings

from gpurental.fleet.models import Host
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Instance, InstanceEvent, InstanceStatus
from gpurental.rentals.services import lifecycle

GB = 1024**3
WARNING, OVER = "disk_warning", "disk_over"


def _notified(instance: Instance, step: str) -> InstanceEvent | None:
    """The notice of this kind in the current run, if any."""
    since = instance.running_since or instance.status_changed_at
    return (
        instance.events.filter(kind=InstanceEvent.Kind.NOTICE, step=step, created_at__gte=since)
        .order_by("-created_at")
        .first()
    )


def instance_disk_check(*, instance: Instance, used: int, now: datetime) -> str:
    """Apply the plan's disk limit to a running instance; returns what was done."""
    limit = instance.plan.disk_gb * GB
    used_text = f"/workspace holds {used / GB:.1f} GB of the plan's {instance.plan.disk_gb} GB"
    if used >= limit:
        over = _notified(instance, OVER)
        if over is None:
            lifecycle.instance_notice(
                instance,
                reason=f"{used_text}: over the limit. Delete files within "
                f"{settings.DISK_GRACE_MINUTES} minutes, or the instance is stopped "
                "(/workspace is kept)",
                step=OVER,
                now=now,
                used_bytes=used,
            )
            return "over"
        if now - over.created_at < timedelta(minutes=settings.DISK_GRACE_MINUTES):
            return ""
        try:
            lifecycle.instance_stop(
                instance=instance,
                reason=f"{used_text}, over the limit for {settings.DISK_GRACE_MINUTES} minutes; "
                "stopped, /workspace kept: start it and delete files, or choose a larger plan",
                now=now,
            )
        except RentalError:
            return ""  # changed state meanwhile
        return "stopped"
    if used >= limit * settings.DISK_WARNING_PERCENT / 100 and _notified(instance, WARNING) is None:
        lifecycle.instance_notice(
            instance,
            reason=f"{used_text}; at {instance.plan.disk_gb} GB it is stopped after a grace period",
            step=WARNING,
            now=now,
            used_bytes=used,
        )
        return "warned"
    return ""


def instances_disk_check(*, host: Host, usage: dict[str, int], now: datetime) -> dict[str, str]:
    """The plan's limit for each running instance of ``host`` whose use it measured."""
    ids = []
    for key in usage:
        try:
            ids.append(uuid.UUID(str(key)))
        except ValueError:
            continue
    done = {}
    running = Instance.objects.filter(host=host, pk__in=ids, status=InstanceStatus.RUNNING)
    for instance in running.select_related("plan", "host"):
        used = usage.get(str(instance.pk))
        if isinstance(used, int) and used >= 0:
            outcome = instance_disk_check(instance=instance, used=used, now=now)
            if outcome:
                done[str(instance.pk)] = outcome
    return done


def volumes_size_check(*, host: Host, usage: dict, now: datetime) -> list[str]:
    """The host's measurement of its volumes: a volume over its size stops the instance
    that mounts it (its data kept), with the reason; the ids of the instances stopped."""
    from gpurental.volumes.services import in_use, volumes_usage_record

    stopped = []
    for volume in volumes_usage_record(host=host, usage=usage, now=now):
        if not in_use(volume) or volume.instance.status != "running":
            continue
        try:
            lifecycle.instance_stop(
                instance=volume.instance,
                reason=f"volume {volume.name} holds {volume.used_bytes / 1024**3:.2f} GB, over "
                f"its {volume.size_gb} GB; stopped, its data kept: delete files from it, or "
                "make a larger volume",
                now=now,
            )
        except RentalError:
            continue
        stopped.append(str(volume.instance_id))
    return stopped
