"""Telemetry reads: paid vs used, chart history, the latest live samples."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.db.models import (
    Aggregate,
    Avg,
    BooleanField,
    Count,
    DateTimeField,
    F,
    Func,
    Max,
    Sum,
    Value,
)

from gpurental.fleet.models import Host
from gpurental.protocol import latest_key, recent_key
from gpurental.rentals.models import Allocation, Instance
from gpurental.rentals.selectors import HELD, HOLDING, instance_gpus, running_seconds
from gpurental.telemetry.models import GpuHour, GpuMinute

log = logging.getLogger(__name__)


class BoolOr(Aggregate):
    function = "BOOL_OR"
    output_field = BooleanField()


# Chart windows: how far back, and the bucket each point stands for. Buckets of an hour
# or more read the hourly rollups (kept a year), shorter ones the minutes.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # buckets are aligned on it, as epoch seconds
WINDOWS = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 600),
    "30d": (timedelta(days=30), 6 * 3600),
}


def instance_usage(*, instance: Instance, now: datetime) -> dict:
    """Paid vs used: running time (what is billed) beside the GPUs' average utilisation.

    The average is over the GPU-minutes that have a rollup while the instance held
    the GPUs; ``coverage`` says how much of the billed time that is (a host whose
    agent was down has no numbers, and no number is better than a made-up one).
    """
    seconds = running_seconds(instance=instance, until=now)
    rows = GpuMinute.objects.filter(instance=instance).aggregate(
        util=Avg("util_avg"),
        gpu_minutes=Count("id"),
        minutes=Count("minute", distinct=True),
        simulated=BoolOr("simulated"),
        mem=Avg("mem_used_avg"),
    )
    measured_s = (rows["minutes"] or 0) * 60
    return {
        "paid_hours": round(seconds / 3600, 2),
        "paid_gpu_hours": round(seconds * instance.gpu_count / 3600, 2),
        "avg_util": None if rows["util"] is None else round(rows["util"], 1),
        "avg_mem_bytes": None if rows["mem"] is None else int(rows["mem"]),
        "measured_minutes": rows["minutes"] or 0,
        "coverage": min(1.0, measured_s / seconds) if seconds else None,
        "simulated": bool(rows["simulated"]),
    }


def instance_history(*, instance: Instance, window: str, now: datetime) -> dict:
    """Per GPU, utilisation and memory points for the 1 h, 24 h or 30 d chart: averages per
    bucket, weighted by the minutes each row stands for, computed in PostgreSQL."""
    span, bucket_s = WINDOWS[window]
    since = now - span
    if bucket_s >= 3600:
        found = GpuHour.objects.filter(instance=instance, hour__gte=since)
        start, weight = F("hour"), F("minutes")
    else:
        found = GpuMinute.objects.filter(instance=instance, minute__gte=since)
        start, weight = F("minute"), Value(1)
    bucket = Func(
        Value(timedelta(seconds=bucket_s)),
        start,
        Value(EPOCH),
        function="date_bin",
        output_field=DateTimeField(),
    )
    rows = (
        found.annotate(bucket=bucket)
        .values("gpu_index", "bucket")
        .annotate(
            n=Sum(weight),
            util=Sum(F("util_avg") * weight),
            peak=Max("util_max"),
            mem=Sum(F("mem_used_avg") * weight),
            total=Max("mem_total"),
        )
        .order_by("gpu_index", "bucket")
    )
    simulated = found.filter(simulated=True).exists()
    points: dict[int, list[dict]] = {}
    for row in rows:
        points.setdefault(row["gpu_index"], []).append(
            {
                "t": row["bucket"].astimezone(UTC).isoformat(),
                "util": round(row["util"] / row["n"], 1),
                "util_max": row["peak"],
                "mem_used": int(row["mem"] / row["n"]),
                "mem_total": row["total"],
            }
        )
    gpus = [{"index": index, "points": found_points} for index, found_points in points.items()]
    return {
        "window": window,
        "bucket_seconds": bucket_s,
        "since": since.isoformat(),
        "until": now.isoformat(),
        "simulated": simulated,
        "gpus": gpus,
    }


def telemetry_scope(*, instance_id) -> dict:
    """What an instance's live stream may carry: its host and the GPU indices it holds now."""
    instance = Instance.objects.select_related("host").filter(pk=instance_id).first()
    if instance is None or instance.host is None or instance.status not in HOLDING:
        return {"host": None, "gpus": [], "simulated": False}
    return {
        "host": instance.host.name,
        "gpus": [g.index for g in instance_gpus(instance)],
        "simulated": instance.host.gpu_source == "simulated",
    }


# --- latest samples (Redis) -----------------------------------------------------


def layer_redis_url() -> str:
    """The channel layer's Redis, where each host's sampler keeps its latest message."""
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    return host["address"] if isinstance(host, dict) else host


def _redis() -> redis.Redis:
    return redis.Redis.from_url(layer_redis_url(), socket_timeout=2)


def recent_samples(*, host: str, instance_id: str, gpu_indices: set[int]) -> list[dict]:
    """The host's recent messages (up to 5 minutes), cut to this instance's GPUs: the
    first screen of the live chart. Empty when Redis cannot be read."""
    try:
        raw = _redis().lrange(recent_key(host), 0, -1)
    except redis.RedisError:
        log.warning("cannot read the recent samples of %s from Redis", host, exc_info=True)
        return []
    samples = []
    for text in raw:
        try:
            message = json.loads(text)
        except ValueError:
            continue
        gpus = [
            gpu
            for gpu in message.get("gpus", [])
            if gpu.get("index") in gpu_indices and gpu.get("instance") == instance_id
        ]
        if gpus:
            samples.append(
                {"ts": message.get("ts"), "simulated": bool(message.get("simulated")), "gpus": gpus}
            )
    return samples


def latest_samples(*, hosts: list[str]) -> dict[str, dict]:
    """The newest message of each host's sampler (absent when older than 15 s or unreadable)."""
    if not hosts:
        return {}
    try:
        values = _redis().mget([latest_key(name) for name in hosts])
    except redis.RedisError:
        log.warning("cannot read the latest samples from Redis", exc_info=True)
        return {}
    return parse_latest(hosts, values)


def parse_latest(hosts: list[str], values: list) -> dict[str, dict]:
    """Host name → its latest message, from an MGET of their latest keys (in that order)."""
    found = {}
    for name, raw in zip(hosts, values, strict=True):
        if raw:
            try:
                found[name] = json.loads(raw)
            except ValueError:
                continue
    return found


def gpu_holders() -> dict[tuple[str, int], str]:
    """(host name, GPU index) → id of the instance holding it now (control plane's view)."""
    rows = Allocation.objects.filter(HELD, instance__status__in=HOLDING).values_list(
        "gpu__host__name", "gpu__index", "instance_id"
    )
    return {(host, index): str(iid) for host, index, iid in rows}


def fleet_hosts() -> list[str]:
    return list(Host.objects.order_by("name").values_list("name", flat=True))


def fleet_heatmap(*, now: datetime) -> list[dict]:
    """Per host, per GPU: the latest utilisation (for the fleet page's first paint)."""
    hosts = list(Host.objects.order_by("name").prefetch_related("gpus"))
    latest = latest_samples(hosts=[h.name for h in hosts])
    rows = []
    for host in hosts:
        sample = latest.get(host.name) or {}
        by_index = {g.get("index"): g for g in sample.get("gpus", [])}
        rows.append(
            {
                "host": host.name,
                "simulated": host.gpu_source == "simulated",
                "gpus": [
                    {"index": gpu.index, "util": (by_index.get(gpu.index) or {}).get("util")}
                    for gpu in host.gpus.all()
                ],
            }
        )
    return rows
