"""Reads of volumes."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from gpurental.fleet.models import Host, HostStatus
from gpurental.volumes.models import Volume, VolumeStatus


def volumes_of(*, account):
    return (
        Volume.objects.filter(account=account)
        .exclude(status=VolumeStatus.DELETED)
        .select_related("host__zone", "instance")
    )


def mounted() -> QuerySet[Volume]:
    """Volumes an instance mounts (filter by instance, or prefetch as ``mounted_volumes``)."""
    return Volume.objects.filter(status=VolumeStatus.AVAILABLE).order_by("mount_path")


def volumes_mounted(*, instance) -> list[dict]:
    """What an instance's start spec mounts: [{"name": docker volume, "path", "volume"}].
    Reads ``instance.mounted_volumes`` where a list prefetched them (no query per row)."""
    found = getattr(instance, "mounted_volumes", None)
    if found is None:
        found = mounted().filter(instance=instance)
    return [{"name": v.docker_name, "path": v.mount_path, "volume": str(v.pk)} for v in found]


def host_for_volume(zone) -> Host | None:
    """Where a new volume in ``zone`` lives: the active host there holding the fewest live
    volumes (then by name); None when the zone has no active host."""
    live = Q(volumes__status__in=[VolumeStatus.RESTORING, VolumeStatus.AVAILABLE])
    hosts = Host.objects.filter(zone=zone, status=HostStatus.ACTIVE)
    return hosts.annotate(n=Count("volumes", filter=live)).order_by("n", "name").first()
