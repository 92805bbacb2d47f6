"""Reads for rentals: free GPUs, quotas, when capacity frees up."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Min, Sum
from psycopg.types.range import Range

from gpurental.catalog.models import GPUModel
from gpurental.fleet.models import GPU, Host, HostStatus
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.placement import FreeGpu, HostFree

# States in which an instance holds GPUs.
HOLDING = (
    InstanceStatus.PENDING,
    InstanceStatus.PROVISIONING,
    InstanceStatus.RUNNING,
    InstanceStatus.STOPPING,
    InstanceStatus.TERMINATING,
)


def from_now(now: datetime) -> Range:
    return Range(now, None, "[)")


def schedulable_hosts(*, now: datetime):
    """Active hosts with a fresh heartbeat (draining, maintenance and offline hosts take nothing new)."""
    fresh = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER)
    return Host.objects.filter(status=HostStatus.ACTIVE, last_heartbeat_at__gte=fresh)


def free_gpus(*, gpu_model: GPUModel, now: datetime, hosts=None) -> list[HostFree]:
    """Per schedulable host, the enabled GPUs of ``gpu_model`` with nothing booked from now on."""
    hosts = schedulable_hosts(now=now) if hosts is None else hosts
    taken = Allocation.objects.filter(period__overlap=from_now(now)).values("gpu_id")
    gpus = (
        GPU.objects.filter(host__in=hosts, model=gpu_model, is_enabled=True)
        .exclude(pk__in=taken)
        .select_related("host")
        .order_by("host__name", "index")
    )
    by_host: dict[int, list[GPU]] = defaultdict(list)
    names = {}
    for gpu in gpus:
        by_host[gpu.host_id].append(gpu)
        names[gpu.host_id] = gpu.host.name
    return [
        HostFree(
            host_id=host_id,
            host_name=names[host_id],
            free=tuple(FreeGpu(g.pk, g.index, frozenset(g.nvlink_peers)) for g in host_gpus),
        )
        for host_id, host_gpus in by_host.items()
    ]


def gpus_held_by(*, user) -> int:
    return (
        Instance.objects.filter(user=user, status__in=HOLDING).aggregate(n=Sum("gpu_count"))["n"]
        or 0
    )


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
    held = instance.allocations.filter(period__upper_inf=True).select_related("gpu")
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
