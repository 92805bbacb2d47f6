"""The storage meter: what keeping data costs, charged per GB-hour and posted to the ledger.

Each stored thing is charged from when it was stored (a volume's creation, a saved image's
push, an instance's stop) to when it stopped being stored (a deletion, a start), at its
size (``Stored.gb``) times its kind's GB-month price over 730 hours. While it is stored,
only closed hours are charged, so a thing kept a month has about 730 charges; the hour it
ends in is charged to the second. Charges never straddle a local midnight (the operator's
zone, as for GPU time), so each belongs to one month's invoice.

Safe to run from many workers at once and twice: each thing's watermark
(``StorageMeter``) is locked while it is metered, and a charge is unique per thing and
start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from gpurental.billing import pricing
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import operator_zone
from gpurental.images.models import SavedImage, SavedImageStatus
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.storage.models import StorageCharge, StorageMeter, StoragePrice, StoredKind
from gpurental.volumes.models import Snapshot, SnapshotStatus, Volume, VolumeStatus

log = logging.getLogger(__name__)

GB = 1024**3  # sizes are in GiB, as the plans' disks and the volumes are given
HOURS_PER_MONTH = Decimal(730)
# Things deleted this recently are looked at again, for the hour they ended in.
ENDED_LOOKBACK = timedelta(days=7)


@dataclass(frozen=True)
class Stored:
    """One stored thing, as the meter sees it."""

    kind: str
    object_id: UUID
    account_id: int
    label: str
    gb: Decimal
    start: datetime
    end: datetime | None  # None: still stored


def gb_of(size_bytes: int) -> Decimal:
    return (Decimal(size_bytes) / GB).quantize(Decimal("0.001"))


def prices() -> dict[str, Decimal]:
    """Each kind's price per GB-month; a kind without a row is free."""
    found = dict(StoragePrice.objects.values_list("kind", "gb_month"))
    return {kind: found.get(kind, Decimal(0)) for kind in StoredKind.values}


def hourly_rate(gb: Decimal, gb_month: Decimal) -> Decimal:
    """The hourly price of ``gb`` GB, exact to 8 places (what a charge records)."""
    return pricing.quantize_money(gb * gb_month / HOURS_PER_MONTH, 8)


# --- what is stored ----------------------------------------------------------------


def stored_volume(volume: Volume) -> Stored:
    return Stored(
        kind=StoredKind.VOLUME,
        object_id=volume.pk,
        account_id=volume.account_id,
        label=volume.name,
        gb=Decimal(volume.size_gb),
        start=volume.created_at,
        end=volume.deleted_at if volume.status == VolumeStatus.DELETED else None,
    )


def stored_image(image: SavedImage) -> Stored:
    return Stored(
        kind=StoredKind.SAVED_IMAGE,
        object_id=image.pk,
        account_id=image.account_id,
        label=image.name,
        gb=gb_of(image.size_bytes),
        start=image.ready_at,
        end=image.deleted_at if image.status == SavedImageStatus.DELETED else None,
    )


def stored_snapshot(snapshot: Snapshot) -> Stored:
    return Stored(
        kind=StoredKind.SNAPSHOT,
        object_id=snapshot.pk,
        account_id=snapshot.account_id,
        label=snapshot.name,
        gb=gb_of(snapshot.size_bytes),
        start=snapshot.ready_at,
        end=snapshot.deleted_at if snapshot.status == SnapshotStatus.DELETED else None,
    )


def stored_workspace(instance: Instance) -> Stored:
    start = instance.stopped_at
    if instance.reservation_id is not None:
        # A booked period is paid in full, stops included: storage starts after it.
        start = max(start, instance.reservation.end)
    return Stored(
        kind=StoredKind.WORKSPACE,
        object_id=instance.pk,
        account_id=instance.user_id,
        label=str(instance),
        gb=Decimal(instance.plan.disk_gb),
        start=start,
        end=None,
    )


def stopped_workspaces():
    """Instances whose /workspace is kept while they are stopped (a dedicated host's are
    part of its lease)."""
    return Instance.objects.filter(
        status=InstanceStatus.STOPPED, stopped_at__isnull=False, lease__isnull=True
    ).select_related("plan", "reservation")


def stored_things(now: datetime) -> Iterator[Stored]:
    """Everything stored now, and what ended lately (its last hour may be unbilled)."""
    since = now - ENDED_LOOKBACK
    volumes = Volume.objects.filter(status=VolumeStatus.AVAILABLE) | Volume.objects.filter(
        status=VolumeStatus.DELETED, deleted_at__gte=since
    )
    for volume in volumes.iterator():
        yield stored_volume(volume)
    images = SavedImage.objects.filter(ready_at__isnull=False).filter(
        status=SavedImageStatus.READY
    ) | SavedImage.objects.filter(
        ready_at__isnull=False, status=SavedImageStatus.DELETED, deleted_at__gte=since
    )
    for image in images.iterator():
        yield stored_image(image)
    snapshots = Snapshot.objects.filter(status=SnapshotStatus.READY) | Snapshot.objects.filter(
        ready_at__isnull=False, status=SnapshotStatus.DELETED, deleted_at__gte=since
    )
    for snapshot in snapshots.iterator():
        yield stored_snapshot(snapshot)
    for instance in stopped_workspaces().iterator():
        yield stored_workspace(instance)


# --- the meter ---------------------------------------------------------------------


def hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def stored_meter(
    *, stored: Stored, now: datetime, price: Decimal, wait: bool = False
) -> list[StorageCharge]:
    """Charge one stored thing up to now (closed hours while it is stored; to the second
    once it ended). Locks its watermark; a thing another worker meters now is skipped,
    unless ``wait`` (a settlement before the thing changes must not be skipped)."""
    end = stored.end if stored.end is not None else hour_floor(now)
    end = min(end, now)
    with transaction.atomic():
        meter, _ = StorageMeter.objects.get_or_create(
            kind=stored.kind, object_id=stored.object_id, defaults={"billed_until": stored.start}
        )
        meter = (
            StorageMeter.objects.select_for_update(skip_locked=not wait).filter(pk=meter.pk).first()
        )
        if meter is None:
            return []
        start = max(stored.start, meter.billed_until)
        if end <= start:
            return []
        rate = hourly_rate(stored.gb, price)
        tariff = pricing.Tariff(hourly_rate=rate, zone=operator_zone())
        charges = []
        for segment in pricing.price_interval(start, end, tariff):
            amount = pricing.charge_amount(segment)
            if amount == 0:
                continue
            entry = LedgerEntry.objects.create(
                user_id=stored.account_id,
                created_at=now,
                kind=LedgerEntry.Kind.USAGE,
                amount=-amount,
                description=f"Storage: {stored.kind.replace('_', ' ')} {stored.label}, {stored.gb} GB, "
                f"{segment.start:%Y-%m-%d %H:%M}–{segment.end:%H:%M} UTC"[:255],
            )
            charges.append(
                StorageCharge.objects.create(
                    account_id=stored.account_id,
                    kind=stored.kind,
                    object_id=stored.object_id,
                    label=stored.label[:120],
                    period_start=segment.start,
                    period_end=segment.end,
                    gb=stored.gb,
                    hourly_rate=rate,
                    amount=amount,
                    ledger_entry=entry,
                    created_at=now,
                )
            )
        meter.billed_until = end
        meter.save(update_fields=["billed_until"])
        return charges


def storage_meter_run(*, now: datetime | None = None) -> int:
    """Meter everything stored; returns how many charges were posted. One thing's
    trouble is logged and the others go on."""
    now = now or timezone.now()
    rates = prices()
    posted = 0
    for stored in stored_things(now):
        try:
            posted += len(stored_meter(stored=stored, now=now, price=rates[stored.kind]))
        except Exception:
            log.exception("storage meter: %s %s was not charged", stored.kind, stored.object_id)
    return posted


def workspace_settle(*, instance: Instance, now: datetime) -> int:
    """Charge a stopped instance's workspace up to ``now``, before it starts or goes:
    once it is not stopped, the meter no longer sees it."""
    if instance.status != InstanceStatus.STOPPED or instance.stopped_at is None:
        return 0
    if instance.lease_id is not None:
        return 0
    stored = replace(stored_workspace(instance), end=now)
    return len(
        stored_meter(stored=stored, now=now, price=prices()[StoredKind.WORKSPACE], wait=True)
    )


def volume_settle(*, volume: Volume, now: datetime) -> int:
    """Charge a volume up to ``now`` at its size, before its size changes."""
    if volume.status != VolumeStatus.AVAILABLE:
        return 0
    stored = replace(stored_volume(volume), end=now)
    return len(stored_meter(stored=stored, now=now, price=prices()[StoredKind.VOLUME], wait=True))
