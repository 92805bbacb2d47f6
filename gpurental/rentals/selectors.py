"""Reads for rentals: free GPUs, quotas, when capacity frees up."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Exists, F, Min, OuterRef, Q
from django.db.models.functions import Collate
from django.utils import timezone
from psycopg.types.range import Range

from gpurental.catalog.models import GPUModel
from gpurental.fleet.models import GPU, Host, HostStatus
from gpurental.rentals.models import Allocation, Instance, InstanceStatus, Reservation
from gpurental.rentals.placement import FreeGpu, HostFree, best_fit_order

# States in which an instance holds GPUs.
HOLDING = (
    InstanceStatus.PENDING,
    InstanceStatus.PROVISIONING,
    InstanceStatus.RUNNING,
    InstanceStatus.UNREACHABLE,
    InstanceStatus.STOPPING,
    InstanceStatus.TERMINATING,
)


# The allocations through which an instance holds its GPUs: open-ended ones (on-demand,
# until it stops) and those of its reservation or dedicated-host lease (bounded, [start, end)).
HELD = Q(period__upper_inf=True) | Q(reservation__isnull=False) | Q(lease__isnull=False)


def from_now(now: datetime) -> Range:
    return Range(now, None, "[)")


def between(start: datetime, end: datetime) -> Range:
    return Range(start, end, "[)")


def schedulable_hosts(*, now: datetime):
    """Active hosts with a fresh heartbeat (draining, maintenance and offline hosts take nothing new)."""
    fresh = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER)
    return Host.objects.filter(status=HostStatus.ACTIVE, last_heartbeat_at__gte=fresh)


def bookable_hosts():
    """Hosts that may take a reservation: active ones (a host that is offline now may be
    back by then; one in maintenance or draining takes nothing new)."""
    return Host.objects.filter(status=HostStatus.ACTIVE)


def _free_gpu_rows(*, gpu_model: GPUModel, hosts, period: Range):
    """The enabled GPUs of ``gpu_model`` on ``hosts`` with nothing booked over ``period``."""
    taken = Allocation.objects.filter(gpu=OuterRef("pk"), period__overlap=period)
    return GPU.objects.filter(host__in=hosts, model=gpu_model, is_enabled=True).exclude(
        Exists(taken)
    )


def _by_host(rows) -> list[HostFree]:
    by_host: dict[int, list[FreeGpu]] = defaultdict(list)
    names = {}
    for host_id, host_name, pk, index, peers in rows:
        by_host[host_id].append(FreeGpu(pk, index, frozenset(peers)))
        names[host_id] = host_name
    return [
        HostFree(host_id=host_id, host_name=names[host_id], free=tuple(free))
        for host_id, free in by_host.items()
    ]


GPU_ROW = ("host_id", "host__name", "pk", "index", "nvlink_peers")


def free_gpus(
    *, gpu_model: GPUModel, now: datetime, hosts=None, period: Range | None = None
) -> list[HostFree]:
    """Per host, the enabled GPUs of ``gpu_model`` with nothing booked over ``period``
    (default: from now on, on the schedulable hosts)."""
    hosts = schedulable_hosts(now=now) if hosts is None else hosts
    period = period or from_now(now)
    # Plain tuples, not model instances: building 8,000 models cost ~100 ms.
    rows = (
        _free_gpu_rows(gpu_model=gpu_model, hosts=hosts, period=period)
        .order_by("host__name", "index")
        .values_list(*GPU_ROW)
    )
    return _by_host(rows)


@dataclass(frozen=True)
class ZoneFree:
    """A GPU model's capacity in one zone: enabled GPUs on its active hosts, and those free
    now on the ones that take launches."""

    zone: str
    region: str
    label: str
    gpus_free: int
    gpus_total: int


def zone_availability(
    *, gpu_model: GPUModel, now: datetime, free: list[HostFree] | None = None
) -> list[ZoneFree]:
    """Per zone (by region, then name), the GPUs of ``gpu_model``; zones with none are left
    out, and so are hosts in no zone. ``free``: ``free_gpus`` already read for it now."""
    if free is None:
        free = free_gpus(gpu_model=gpu_model, now=now)
    free_on = {h.host_id: len(h.free) for h in free}
    rows = (
        GPU.objects.filter(
            model=gpu_model,
            is_enabled=True,
            host__status=HostStatus.ACTIVE,
            host__zone__isnull=False,
        )
        .values("host_id", "host__zone__name", "host__zone__region", "host__zone__label")
        .annotate(n=Count("pk"))
    )
    zones: dict[str, list] = {}
    for row in rows:
        key = row["host__zone__name"]
        zone = zones.setdefault(key, [row["host__zone__region"], row["host__zone__label"], 0, 0])
        zone[2] += free_on.get(row["host_id"], 0)
        zone[3] += row["n"]
    return [
        ZoneFree(name, region, label, free, total)
        for name, (region, label, free, total) in sorted(
            zones.items(), key=lambda z: (z[1][0], z[0])
        )
    ]


def best_hosts(
    *,
    gpu_model: GPUModel,
    count: int,
    period: Range,
    hosts,
    linked: bool,
    after: tuple[int, str] | None = None,
    limit: int | None = None,
) -> list[HostFree]:
    """Up to ``limit`` hosts with at least ``count`` GPUs free over ``period``, in
    best-fit order (``placement.best_fit_order``: fewest free, then name), with their
    free GPUs; only those after ``after`` (a host's free count and name) in that order.

    The database groups and orders the fleet, so that a placement reads the GPU rows of
    a few hosts, not of all (8,000 rows at 1,000 hosts cost 30–45 ms in Python).
    ``linked``: only hosts that may have an NVLink-connected set of ``count``, i.e. with
    at least ``count`` free GPUs that each have ``count - 1`` NVLink peers or more (what a
    connected set needs; whether their peers are the free ones is left to placement).
    Names are ordered byte by byte (``COLLATE "C"``), as Python orders them.
    """
    free = _free_gpu_rows(gpu_model=gpu_model, hosts=hosts, period=period)
    candidates = (
        free.values("host_id", "host__name")  # grouped by both: the name orders and pages
        .annotate(
            n=Count("pk"),
            name=Collate(F("host__name"), "C"),
            n_linked=Count("pk", filter=Q(nvlink_peers__len__gte=count - 1)),
        )
        .filter(n__gte=count)
    )
    if linked:
        candidates = candidates.filter(n_linked__gte=count)
    if after is not None:
        candidates = candidates.filter(Q(n__gt=after[0]) | Q(n=after[0], name__gt=after[1]))
    candidates = candidates.order_by("n", "name").values("host_id")
    if limit is not None:
        candidates = candidates[:limit]
    # One statement: the hosts and their GPU rows come from one snapshot.
    rows = free.filter(host_id__in=candidates).values_list(*GPU_ROW)
    return sorted(_by_host(rows), key=best_fit_order)


def gpus_held_by(*, user, now: datetime | None = None) -> int:
    """GPUs the account holds now, whatever booked them (what the console and the API show
    in use). The quota rule and its sums live in ``rentals/holdings.py``."""
    from gpurental.rentals import holdings  # it builds on this module's ranges

    return holdings.gpus_held_now(account=user, now=now or timezone.now())


def next_release(*, gpu_model: GPUModel, now: datetime) -> datetime | None:
    """When the first booked GPU of this model frees up, if any booking has an end."""
    return (
        Allocation.objects.filter(
            gpu__model=gpu_model, period__overlap=from_now(now), period__upper_inf=False
        )
        .aggregate(first=Min("period__endswith"))
        .get("first")
    )


def instance_gpus(instance: Instance) -> list[GPU]:
    held = instance.allocations.filter(HELD).select_related("gpu")
    return sorted((a.gpu for a in held), key=lambda g: g.index)


def instances_visible_to(*, user):
    """Customers see their own instances; staff see all."""
    qs = Instance.objects.select_related("host", "plan", "image", "gpu_model")
    return qs if user.is_staff else qs.filter(user=user)


def instance_visible_to(*, user, instance_id) -> Instance | None:
    return instances_visible_to(user=user).filter(pk=instance_id).first()


def running_seconds(*, instance: Instance, until: datetime) -> float:
    """Seconds the instance has spent running (from its transition events) up to ``until``."""
    total, since = 0.0, None
    transitions = instance.events.filter(kind="transition", created_at__lte=until).order_by(
        "created_at", "id"
    )
    for to_status, at in transitions.values_list("to_status", "created_at"):
        if to_status == InstanceStatus.RUNNING and since is None:
            since = at
        elif to_status != InstanceStatus.RUNNING and since is not None:
            total += (at - since).total_seconds()
            since = None
    if since is not None:
        total += max(0.0, (until - since).total_seconds())
    return total


@dataclass(frozen=True)
class HourFree:
    start: datetime
    free: int  # GPUs of the model with nothing booked over the hour
    largest_block: int  # the most of them on one host (a booking needs one host)


def availability(*, gpu_model: GPUModel, start: datetime, hours: int) -> tuple[int, list[HourFree]]:
    """Free GPUs of ``gpu_model`` per hour from ``start``: (GPUs in all, hours).

    A GPU is free in an hour when no allocation overlaps it: on-demand instances hold
    theirs until they stop, so they count as taken for every hour ahead.
    """
    end = start + timedelta(hours=hours)
    gpus = dict(
        GPU.objects.filter(host__in=bookable_hosts(), model=gpu_model, is_enabled=True).values_list(
            "pk", "host_id"
        )
    )
    busy = list(
        Allocation.objects.filter(gpu_id__in=gpus, period__overlap=between(start, end)).values_list(
            "gpu_id", "period"
        )
    )
    slots = []
    for hour in range(hours):
        lo = start + timedelta(hours=hour)
        hi = lo + timedelta(hours=1)
        taken = {
            gpu_id
            for gpu_id, period in busy
            if period.lower < hi and (period.upper is None or period.upper > lo)
        }
        per_host: dict[int, int] = defaultdict(int)
        for gpu_id, host_id in gpus.items():
            if gpu_id not in taken:
                per_host[host_id] += 1
        slots.append(HourFree(lo, sum(per_host.values()), max(per_host.values(), default=0)))
    return len(gpus), slots


def reservations_visible_to(*, user):
    """Customers see their own reservations; staff see all."""
    qs = Reservation.objects.select_related("plan", "gpu_model", "image", "user")
    return qs if user.is_staff else qs.filter(user=user)
