"""What the console pages show, read in one place."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from gpurental.billing.selectors import balance_of
from gpurental.catalog.models import Plan
from gpurental.fleet.models import GPU, Host
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.selectors import HELD, HOLDING, gpus_held_by, instance_gpus, running_seconds
from gpurental.telemetry.selectors import fleet_heatmap, instance_usage

LIVE = (
    InstanceStatus.PENDING,
    InstanceStatus.PROVISIONING,
    InstanceStatus.RUNNING,
    InstanceStatus.STOPPING,
    InstanceStatus.TERMINATING,
)


def jupyter_url(instance: Instance) -> str:
    return (
        f"http://{instance.host.address}:{instance.jupyter_port}/lab?token={instance.jupyter_token}"
    )


def estimated_cost(
    instance: Instance, *, until: dt.datetime, since: dt.datetime | None = None
) -> Decimal:
    """Running time × the plan's rate. An estimate: the meter (billing) has the exact figures."""
    seconds = running_seconds(instance=instance, until=until)
    if since is not None:
        seconds -= running_seconds(instance=instance, until=since)
    return (Decimal(str(seconds)) / 3600 * instance.plan.hourly_rate).quantize(Decimal("0.01"))


def dashboard_context(*, user) -> dict:
    now = timezone.now()
    month_start = now.astimezone(timezone.get_current_timezone()).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    instances = list(
        Instance.objects.filter(user=user)
        .exclude(status=InstanceStatus.TERMINATED, terminated_at__lt=now - dt.timedelta(days=7))
        .select_related("host", "plan", "gpu_model", "image")
    )
    spend = sum(
        (estimated_cost(i, until=now, since=month_start) for i in instances), Decimal("0.00")
    )
    return {
        "instances": instances,
        "balance": balance_of(user=user),
        "currency": settings.BILLING_CURRENCY,
        "spend_this_month": spend,
        "gpus_in_use": gpus_held_by(user=user),
        "quota": user.gpu_quota,
        "live": any(i.status in LIVE for i in instances),
    }


def instance_context(*, instance: Instance, viewer) -> dict:
    now = timezone.now()
    is_owner = instance.user_id == viewer.pk
    return {
        "instance": instance,
        "is_owner": is_owner,
        "gpus": instance_gpus(instance),
        "events": instance.events.select_related("actor").order_by("created_at", "id"),
        "cost": estimated_cost(instance, until=now),
        "currency": settings.BILLING_CURRENCY,
        "usage": instance_usage(instance=instance, now=now),
        "idle_threshold": settings.IDLE_UTILIZATION_PERCENT,
        "can": {
            "open": is_owner and instance.status == InstanceStatus.RUNNING,
            "stop": instance.status
            in (InstanceStatus.PENDING, InstanceStatus.PROVISIONING, InstanceStatus.RUNNING),
            "start": instance.status == InstanceStatus.STOPPED,
            "restart": instance.status == InstanceStatus.RUNNING,
            "terminate": instance.status
            not in (InstanceStatus.TERMINATING, InstanceStatus.TERMINATED),
        },
    }


def price_table() -> dict:
    """Per GPU model and count: hourly, off-peak and reserved prices (for the launch estimate)."""
    table: dict = defaultdict(dict)
    for plan in Plan.objects.filter(is_active=True).select_related("gpu_model"):
        table[plan.gpu_model.slug][plan.gpu_count] = {
            "hourly": str(plan.hourly_rate.quantize(Decimal("0.01"))),
            "off_peak": str(plan.off_peak_rate.quantize(Decimal("0.01"))),
            "window": f"{plan.off_peak_start:%H:%M}–{plan.off_peak_end:%H:%M}",
            "vcpus": plan.vcpus,
            "memory_gb": plan.memory_gb,
        }
    return {"currency": settings.BILLING_CURRENCY, "plans": table}


def fleet_context(*, now: dt.datetime) -> dict:
    held_gpu_ids = set(
        Allocation.objects.filter(HELD, instance__status__in=HOLDING).values_list(
            "gpu_id", flat=True
        )
    )
    hosts = Host.objects.annotate(
        gpu_total=Count("gpus", filter=Q(gpus__is_enabled=True))
    ).order_by("name")
    host_rows = []
    for host in hosts:
        gpu_ids = list(host.gpus.filter(is_enabled=True).values_list("pk", flat=True))
        used = sum(1 for pk in gpu_ids if pk in held_gpu_ids)
        age = (now - host.last_heartbeat_at).total_seconds() if host.last_heartbeat_at else None
        stale = age is None or age > settings.HOST_OFFLINE_AFTER
        host_rows.append(
            {"host": host, "used": used, "free": len(gpu_ids) - used, "age": age, "stale": stale}
        )
    occupancy: dict = defaultdict(Counter)
    for gpu in GPU.objects.filter(is_enabled=True).select_related("model"):
        occupancy[gpu.model.name]["total"] += 1
        occupancy[gpu.model.name]["used"] += gpu.pk in held_gpu_ids
    running = (
        Instance.objects.filter(status__in=LIVE)
        .select_related("user", "host", "gpu_model")
        .order_by("-created_at")
    )
    return {
        "hosts": host_rows,
        "heatmap": fleet_heatmap(now=now),
        "instances": running,
        "occupancy": [
            {
                "model": name,
                "used": c["used"],
                "total": c["total"],
                "percent": round(100 * c["used"] / c["total"]) if c["total"] else 0,
            }
            for name, c in sorted(occupancy.items())
        ],
    }
