"""What images does when fleet announces a heartbeat (``fleet.signals``): the host's list
of cached customer images replaces its rows, which placement reads."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction
from django.dispatch import receiver

from gpurental.fleet.signals import heartbeat_recorded
from gpurental.images.models import HostImage

MAX_IMAGES_PER_HOST = 500  # a host is less trusted than the control plane: bounded


def _entries(images: list) -> dict[str, tuple[int, datetime | None]]:
    entries = {}
    for item in images[:MAX_IMAGES_PER_HOST]:
        if not isinstance(item, dict) or not isinstance(item.get("ref"), str):
            continue
        size = item.get("bytes")
        used = item.get("last_used")
        entries[item["ref"][:300]] = (
            size if isinstance(size, int) and size >= 0 else 0,
            datetime.fromtimestamp(used, tz=UTC) if isinstance(used, int | float) else None,
        )
    return entries


@receiver(heartbeat_recorded, dispatch_uid="images.heartbeat")
def heartbeat_lists_cached_images(sender, host, images=None, **kwargs):
    if not isinstance(images, list):
        return  # the beat carried no listing (an older agent, or nothing changed)
    entries = _entries(images)
    with transaction.atomic():
        HostImage.objects.filter(host=host).exclude(reference__in=list(entries)).delete()
        for reference, (size, used) in entries.items():
            HostImage.objects.update_or_create(
                host=host,
                reference=reference,
                defaults={"size_bytes": size, "last_used_at": used},
            )
