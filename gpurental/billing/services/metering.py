"""The meter: charges for the closed time instances ran, posted to the ledger.

Billing of a run starts at ``running_since`` and ends at ``stopped_at`` (a stop,
terminate, failure, or a lost host's last heartbeat); while an instance runs, only
closed UTC minutes are charged, and never past its host's last heartbeat (a host
that falls silent may turn out to be lost, and time after its last heartbeat is
never billed). ``Instance.billed_until`` is the watermark: each charge starts
where the previous one ended, so the unique (instance, period_start) constraint
catches any second charge for the same time.

Each run posts, per instance, one charge per pricing segment of
``[billed_until, end)``: one rate kind each, within one local day, so a charge
never straddles an off-peak edge or a month.

Many workers may run the meter at once (DESIGN.md, "Many workers over one table"):
each takes a batch of due instances with ``SELECT … FOR UPDATE SKIP LOCKED`` in a
short transaction, so no two workers meter the same instance and none waits.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Max, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from gpurental.billing import pricing
from gpurental.billing.models import Charge, LedgerEntry
from gpurental.billing.selectors import operator_zone
from gpurental.rentals.models import Instance, InstanceStatus

log = logging.getLogger(__name__)
S = InstanceStatus
BATCH = 50
# Holding GPUs in a billed run: running, or provisioning during an in-place restart.
RUNNING = (S.RUNNING, S.PROVISIONING)


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def billing_end(instance: Instance, *, now: datetime) -> datetime | None:
    """Where billing of the instance's current run stops, as far as ``now`` knows."""
    if instance.running_since is None:
        return None  # never ran (a failed launch costs nothing), or starting again
    if instance.stopped_at is not None:
        return instance.stopped_at
    if instance.status in RUNNING:
        end = minute_floor(now)
        beat = instance.host.last_heartbeat_at if instance.host_id else None
        return min(end, minute_floor(beat)) if beat is not None else end
    # Left a running state without a stop time (stopped during a restart): billing
    # ends when the state changed.
    return min(instance.status_changed_at, now)


def instance_meter(*, instance: Instance, now: datetime) -> list[Charge]:
    """Charge ``instance`` (locked by the caller) up to ``billing_end``; returns the new charges."""
    if instance.reservation_id is not None:
        return []  # paid at booking (see rentals.services.reservations)
    if instance.lease_id is not None:
        return []  # the dedicated host's lease is metered instead (baremetal.services)
    end = billing_end(instance, now=now)
    if end is None:
        return []
    start = max(instance.running_since, instance.billed_until or instance.running_since)
    if end <= start:
        return []
    if instance.without_gpus:
        # No-GPU mode: one flat rate, no GPU, no off-peak window (pricing.Tariff's equal
        # window ends mean none).
        tariff = pricing.Tariff(hourly_rate=instance.plan.no_gpu_hourly_rate, zone=operator_zone())
        kind, gpu_count = pricing.NO_GPU, 0
    else:
        tariff = pricing.Tariff.of(instance.plan, operator_zone())
        kind, gpu_count = None, instance.gpu_count
    segments = pricing.price_interval(start, end, tariff)
    charges = Charge.objects.bulk_create(
        Charge(
            instance_id=instance.pk,
            user_id=instance.user_id,
            period_start=segment.start,
            period_end=segment.end,
            rate_kind=kind or segment.rate_kind,
            gpu_count=gpu_count,
            hourly_rate=segment.hourly_rate,
            amount=pricing.charge_amount(segment),
            created_at=now,
        )
        for segment in segments
    )
    LedgerEntry.objects.bulk_create(
        LedgerEntry(
            user_id=instance.user_id,
            created_at=now,
            kind=LedgerEntry.Kind.USAGE,
            amount=-charge.amount,
            charge=charge,
            description=_describe(instance, charge),
        )
        for charge in charges
    )
    Instance.objects.filter(pk=instance.pk).update(billed_until=end)
    instance.billed_until = end
    return charges


def meter_run(*, now: datetime | None = None) -> int:
    """Meter every due instance; returns how many charges were posted. Safe to run from
    many workers at once, and twice: the second run finds nothing due."""
    now = now or timezone.now()
    seen: set = set()
    posted = 0
    while True:
        with transaction.atomic():
            batch = list(
                _due(now)
                .exclude(pk__in=seen)
                .select_related("plan", "host")
                .select_for_update(skip_locked=True, of=("self",))
                .order_by("pk")[:BATCH]
            )
            if not batch:
                return posted
            for instance in batch:
                seen.add(instance.pk)
                posted += _meter_one(instance, now)


def instance_settle(*, instance_id, now: datetime | None = None) -> int:
    """Meter one instance now, waiting for its lock: before ``instance_start`` forgets
    the last run's ``stopped_at``, everything up to it must be charged."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = (
            Instance.objects.select_related("plan", "host")
            .select_for_update(of=("self",))
            .get(pk=instance_id)
        )
        return _meter_one(instance, now)


def _due(now: datetime) -> QuerySet[Instance]:
    """Instances that may have unbilled time (a superset: ``billing_end`` decides)."""
    # A reservation's instance was paid at booking: the meter leaves it alone.
    # So is a dedicated host's instance: its lease is metered (baremetal.services).
    return Instance.objects.filter(
        running_since__isnull=False, reservation__isnull=True, lease__isnull=True
    ).filter(
        Q(billed_until__isnull=True)
        | Q(billed_until__lt=Coalesce("stopped_at", Value(minute_floor(now))))
    )


def _meter_one(instance: Instance, now: datetime) -> int:
    try:
        with transaction.atomic():  # a savepoint: a refused charge leaves the batch intact
            return len(instance_meter(instance=instance, now=now))
    except IntegrityError:
        # Time already charged means the watermark was behind its charges: move it to
        # the last charge, so the next run goes on from there.
        last = Charge.objects.filter(instance=instance).aggregate(end=Max("period_end"))["end"]
        if last is not None and (instance.billed_until is None or last > instance.billed_until):
            log.warning("instance %s: charged up to %s already; watermark moved", instance.pk, last)
            Instance.objects.filter(pk=instance.pk).update(billed_until=last)
        else:
            log.exception("instance %s: a charge was refused", instance.pk)
        return 0


def _describe(instance: Instance, charge: Charge) -> str:
    kind = dict(pricing.KIND_LABELS)[charge.rate_kind]
    return (
        f"{instance} ({instance.plan.name}), {kind}, "
        f"{charge.period_start:%Y-%m-%d %H:%M:%S}–{charge.period_end:%H:%M:%S} UTC"
    )[:255]
