"""What the console pages show, read in one place."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Prefetch, Q
from django.utils import timezone

from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import balance_of, instance_cost, month_spend
from gpurental.catalog.models import GPUModel, Plan
from gpurental.fleet.models import GPU, Host
from gpurental.gateway import routes
from gpurental.rentals.models import (
    Allocation,
    Instance,
    InstanceStatus,
    Reservation,
    ReservationStatus,
)
from gpurental.rentals.selectors import (
    HELD,
    HOLDING,
    availability,
    gpus_held_by,
    instance_gpus,
    reservations_visible_to,
)
from gpurental.rentals.services import lifecycle, reservations, saving
from gpurental.rentals.services.reservations import refund_for
from gpurental.telemetry.selectors import fleet_heatmap, instance_usage
from gpurental.volumes.snapshots import configured as snapshots_configured

LIVE = (
    InstanceStatus.PENDING,
    InstanceStatus.PROVISIONING,
    InstanceStatus.RUNNING,
    InstanceStatus.UNREACHABLE,
    InstanceStatus.STOPPING,
    InstanceStatus.TERMINATING,
)


def dashboard_context(*, user) -> dict:
    now = timezone.now()
    instances = list(
        Instance.objects.filter(user=user)
        .exclude(status=InstanceStatus.TERMINATED, terminated_at__lt=now - dt.timedelta(days=7))
        .select_related("host", "plan", "gpu_model", "image")
    )
    return {
        "instances": instances,
        "balance": balance_of(user=user),
        "currency": settings.BILLING_CURRENCY,
        "spend": month_spend(user=user, now=now),
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
        "gateway_origin": routes.origin(instance.pk),
        "http_ports": list(instance.image.http_ports or []),
        "gpus": instance_gpus(instance),
        "events": instance.events.select_related("actor").order_by("created_at", "id"),
        "cost": instance_cost(instance=instance, now=now),
        "currency": settings.BILLING_CURRENCY,
        "usage": instance_usage(instance=instance, now=now),
        "idle_threshold": settings.IDLE_UTILIZATION_PERCENT,
        "can": {
            "open": is_owner and instance.status == InstanceStatus.RUNNING,
            "stop": instance.status in lifecycle.STOPPABLE,
            "start": instance.status == InstanceStatus.STOPPED,
            "snapshot": instance.status == InstanceStatus.STOPPED
            and not instance.lease_id
            and snapshots_configured(),
            # No-GPU mode: on-demand instances only (lifecycle.instance_start).
            "start_without_gpus": instance.is_on_demand,
            # Auto-recover: on-demand instances only (lifecycle.instance_set_auto_recover).
            "auto_recover": instance.is_on_demand
            and instance.status not in (InstanceStatus.TERMINATING, InstanceStatus.TERMINATED),
            "idle_policy": instance.status
            not in (InstanceStatus.TERMINATING, InstanceStatus.TERMINATED),
            "restart": instance.status == InstanceStatus.RUNNING,
            "save_image": instance.status in saving.SAVABLE,
            "terminate": instance.status in lifecycle.TERMINABLE,
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


# --- reservations -----------------------------------------------------------------


def bookable_models():
    """GPU models with at least one active plan, by name."""
    return GPUModel.objects.filter(plans__is_active=True).distinct().order_by("name")


def _level(free: int, total: int) -> str:
    """A colour class for a cell: how much of the model is free that hour."""
    if free <= 0:
        return "none"
    if free >= total:
        return "all"
    return "most" if free * 2 >= total else "few"


def availability_grid(*, gpu_model: GPUModel, now: dt.datetime) -> dict:
    """Free GPUs of the model per UTC hour, one row per UTC day, from today to the
    booking horizon. Hours outside [this hour, now + horizon] are marked not bookable."""
    horizon = settings.RESERVATION_HORIZON_DAYS
    first = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    last_start = now + dt.timedelta(days=horizon)
    total, hours = availability(gpu_model=gpu_model, start=first, hours=24 * (horizon + 1))
    days = []
    for day in range(horizon + 1):
        cells = []
        for slot in hours[day * 24 : (day + 1) * 24]:
            bookable = slot.start + dt.timedelta(hours=1) > now and slot.start <= last_start
            cells.append(
                {
                    "slot": slot,
                    "level": _level(slot.free, total) if bookable else "out",
                    "bookable": bookable,
                }
            )
        days.append({"day": (first + dt.timedelta(days=day)).date(), "cells": cells})
    return {"total": total, "days": days, "hours": range(24)}


def _reservation_row(reservation: Reservation, now: dt.datetime) -> dict:
    instances = list(reservation.instances.all())  # newest first (prefetched)
    return {
        "reservation": reservation,
        "refund": refund_for(reservation, now=now),
        "instance": instances[0] if instances else None,
    }


def _with_instances(qs):
    return qs.prefetch_related(
        Prefetch("instances", queryset=Instance.objects.order_by("-created_at"))
    )


def reservations_context(*, user, model_slug: str | None, now: dt.datetime) -> dict:
    """The reservations page: availability of one model, its plans, the user's own bookings."""
    models = list(bookable_models())
    model = next((m for m in models if m.slug == model_slug), models[0] if models else None)
    own = _with_instances(reservations_visible_to(user=user).filter(user=user)).order_by(
        "-period__startswith", "-created_at"
    )
    plans = Plan.objects.filter(gpu_model=model, is_active=True).order_by("gpu_count")
    return {
        "models": models,
        "model": model,
        "grid": availability_grid(gpu_model=model, now=now) if model else None,
        "plans": [{"plan": p, "discount_percent": p.reserved_discount * 100} for p in plans],
        "reservations": [_reservation_row(r, now) for r in own],
        "currency": settings.BILLING_CURRENCY,
        "policy": {
            "full_refund_hours": settings.RESERVATION_FULL_REFUND_HOURS,
            "late_refund_percent": settings.RESERVATION_LATE_REFUND_PERCENT,
            "horizon_days": settings.RESERVATION_HORIZON_DAYS,
            "min_minutes": settings.RESERVATION_MIN_MINUTES,
            "max_hours": settings.RESERVATION_MAX_HOURS,
        },
    }


def reservation_context(*, reservation: Reservation, now: dt.datetime) -> dict:
    reservation = _with_instances(Reservation.objects.filter(pk=reservation.pk)).get()
    instances = list(reservation.instances.all())
    return {
        **_reservation_row(reservation, now),
        "instances": instances,
        # Its instance was terminated before the end: a new one may use the rest of it.
        "relaunch": reservation.status == ReservationStatus.ACTIVE
        and now < reservation.end
        and bool(instances)
        and all(i.status == InstanceStatus.TERMINATED for i in instances),
        "events": reservation.events.select_related("actor").order_by("created_at", "id"),
        "allocations": Allocation.objects.filter(reservation=reservation)
        .select_related("gpu__host")
        .order_by("gpu__host__name", "gpu__index"),
        "currency": settings.BILLING_CURRENCY,
    }


def reservation_quote(
    *, gpu_model: GPUModel, gpu_count: int, start: dt.datetime, end: dt.datetime, now: dt.datetime
) -> dict:
    """What the booking would cost (the booking's own quote: its checks, its price), and
    whether the table shows room for it (the booking itself decides). Raises RentalError."""
    quote = reservations.reservation_quote(
        gpu_model=gpu_model, gpu_count=gpu_count, start=start, end=end, now=now
    )
    plan, start, end = quote.plan, quote.start, quote.end
    seconds = (end - start) // dt.timedelta(seconds=1)
    first = start.replace(minute=0, second=0, microsecond=0)
    hours = -(-(end - first) // dt.timedelta(hours=1))  # the hours it touches, rounded up
    _, slots = availability(gpu_model=gpu_model, start=first, hours=max(1, hours))
    together = min((s.largest_block for s in slots), default=0)
    return {
        "plan": plan,
        "price": quote.price,
        "hours": seconds / 3600,
        "on_demand": quantize_money(plan.hourly_rate * seconds / 3600),
        "together": together,
        "fits": together >= plan.gpu_count,
        "currency": settings.BILLING_CURRENCY,
    }
