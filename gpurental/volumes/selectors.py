"""Reads of volumes."""

from __future__ import annotations

from gpurental.volumes.models import Volume, VolumeStatus


def volumes_of(*, account):
    return (
        Volume.objects.filter(account=account)
        .exclude(status=VolumeStatus.DELETED)
        .select_related("host", "instance")
    )


def volumes_mounted(*, instance) -> list[dict]:
    """What an instance's start spec mounts: [{"name": docker volume, "path", "volume"}]."""
    return [
        {"name": v.docker_name, "path": v.mount_path, "volume": str(v.pk)}
        for v in Volume.objects.filter(instance=instance, status=VolumeStatus.AVAILABLE).order_by(
            "mount_path"
        )
    ]
