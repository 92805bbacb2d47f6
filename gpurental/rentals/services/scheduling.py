"""Placement with the database as referee.

The placement rules (pure) propose GPU sets; each proposal is inserted inside a
savepoint, and the exclusion constraint refuses one that a concurrent launch took
first; then the next proposal is tried, and after a full round the free GPUs are
read again. Nothing here locks GPUs up front: the constraint is the lock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, OperationalError, transaction
from psycopg.types.range import Range

from gpurental.catalog.models import GPUModel
from gpurental.fleet.models import Host
from gpurental.rentals import selectors
from gpurental.rentals.exceptions import NoCapacity
from gpurental.rentals.models import Allocation, Instance, Reservation
from gpurental.rentals.placement import Proposal, proposals

ROUNDS = 5
DEADLOCK_DETECTED = "40P01"


def _no_capacity_message(
    *, gpu_model: GPUModel, count: int, now: datetime, host: Host | None
) -> str:
    free = selectors.free_gpus(gpu_model=gpu_model, now=now, hosts=[host] if host else None)
    total_free = sum(len(h.free) for h in free)
    largest = max(free, key=lambda h: len(h.free), default=None)
    where = f"on host {host.name}" if host else "on any host"
    parts = [f"no {count}× {gpu_model.short_name} free {where}"]
    if total_free:
        parts.append(
            f"{total_free} {gpu_model.short_name} free in all, at most {len(largest.free)} together "
            f"(on {largest.host_name}); a launch needs all its GPUs on one host"
        )
    else:
        parts.append(f"every {gpu_model.short_name} is in use")
    release = selectors.next_release(gpu_model=gpu_model, now=now)
    if release is not None:
        parts.append(f"the next one frees up at {release:%Y-%m-%d %H:%M} UTC")
    return "; ".join(parts)


def _hold(free: Callable[[], list], count: int, holder: dict, period: Range) -> Proposal | None:
    """Insert allocations for the first proposal the database accepts; None if none does."""
    for _ in range(ROUNDS):
        tried = 0
        for proposal in proposals(free(), count):  # made one by one, as they are tried
            tried += 1
            try:
                with transaction.atomic():  # a savepoint: a refused proposal leaves nothing behind
                    Allocation.objects.bulk_create(
                        Allocation(gpu_id=gpu_id, period=period, **holder)
                        for gpu_id in proposal.gpu_ids
                    )
                return proposal
            except IntegrityError:
                continue  # taken meanwhile by a concurrent launch: next candidate
            except OperationalError as exc:
                # Two launches inserting the same GPU at the same moment wait on each
                # other; PostgreSQL breaks the tie by failing one. For it, that GPU is taken.
                if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_DETECTED:
                    raise
        if not tried:
            return None
    return None


def gpus_allocate(
    *, instance: Instance, gpu_model: GPUModel, count: int, now: datetime, host: Host | None = None
) -> Proposal:
    """Hold ``count`` GPUs for ``instance`` from ``now`` on (open-ended). Raises NoCapacity."""
    hosts = [host] if host is not None else None
    proposal = _hold(
        lambda: selectors.free_gpus(gpu_model=gpu_model, now=now, hosts=hosts),
        count,
        {"instance": instance},
        selectors.from_now(now),
    )
    if proposal is None:
        raise NoCapacity(
            _no_capacity_message(gpu_model=gpu_model, count=count, now=now, host=host),
            field="gpu_count",
        )
    return proposal


def gpus_reserve(
    *, reservation: Reservation, gpu_model: GPUModel, count: int, start: datetime, end: datetime
) -> Proposal:
    """Hold ``count`` GPUs on one host for ``reservation`` over [start, end). Raises NoCapacity."""
    period = selectors.between(start, end)
    proposal = _hold(
        lambda: selectors.free_gpus(
            gpu_model=gpu_model, now=start, hosts=selectors.bookable_hosts(), period=period
        ),
        count,
        {"reservation": reservation},
        period,
    )
    if proposal is None:
        free = selectors.free_gpus(
            gpu_model=gpu_model, now=start, hosts=selectors.bookable_hosts(), period=period
        )
        most = max((len(h.free) for h in free), default=0)
        raise NoCapacity(
            f"no {count}× {gpu_model.short_name} free on one host from {start:%Y-%m-%d %H:%M} "
            f"to {end:%Y-%m-%d %H:%M} UTC; at most {most} together then. "
            "See the availability table for free hours",
            field="gpu_count",
        )
    return proposal


def gpus_release(*, instance: Instance, at: datetime) -> int:
    """Close the instance's open allocations at ``at`` (never before they started)."""
    released = 0
    for allocation in instance.allocations.filter(period__upper_inf=True):
        end = max(at, allocation.period.lower)
        if end == allocation.period.lower:
            allocation.delete()  # an empty hold leaves no trace worth keeping
        else:
            Allocation.objects.filter(pk=allocation.pk).update(
                period=type(allocation.period)(allocation.period.lower, end, "[)")
            )
        released += 1
    return released
