"""Prometheus text exposition (format 0.0.4), written by hand: no client library needed.

Per-GPU gauges, named like NVIDIA's DCGM exporter but prefixed, come from each host
sampler's latest message (kept 15 s in Redis); fleet numbers come from the database.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.db import connection
from django.db.models import Count

from gpurental.fleet.models import Host
from gpurental.rentals.models import Instance, InstanceEvent, InstanceStatus
from gpurental.telemetry.selectors import fleet_hosts, gpu_holders, latest_samples

LAUNCH_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600)

GPU_GAUGES = (
    ("gpurental_gpu_utilization", "util", "GPU utilisation in percent (latest 1 s sample)."),
    ("gpurental_gpu_memory_used_bytes", "mem_used", "GPU memory in use, bytes."),
    ("gpurental_gpu_memory_total_bytes", "mem_total", "GPU memory, bytes."),
    ("gpurental_gpu_temperature_celsius", "temp", "GPU temperature, degrees Celsius."),
    ("gpurental_gpu_power_watts", "power", "GPU board power draw, watts."),
    ("gpurental_gpu_sm_clock_mhz", "sm_clock", "GPU SM clock, MHz."),
)


def escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**pairs: str) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs.items()) + "}"


def number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


def family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines.extend(f"{name}{label} {number(value)}" for label, value in samples)
    return lines


def gpu_lines(*, now: float) -> list[str]:
    hosts = fleet_hosts()
    latest = latest_samples(hosts=hosts)
    holders = gpu_holders()
    per_metric: dict[str, list[tuple[str, float]]] = {name: [] for name, _, _ in GPU_GAUGES}
    ages = []
    for host in hosts:
        message = latest.get(host)
        if not message:
            continue
        ages.append((labels(host=host), round(max(0.0, now - float(message.get("ts", now))), 3)))
        for gpu in message.get("gpus", []):
            if gpu.get("stale"):
                continue
            index = gpu.get("index")
            label = labels(
                host=host,
                gpu=str(index),
                instance=holders.get((host, index), ""),
                simulated="true" if message.get("simulated") else "false",
            )
            for name, key, _ in GPU_GAUGES:
                if gpu.get(key) is not None:
                    per_metric[name].append((label, gpu[key]))
    lines = []
    for name, _, help_text in GPU_GAUGES:
        lines += family(name, "gauge", help_text, per_metric[name])
    lines += family(
        "gpurental_host_sample_age_seconds",
        "gauge",
        "Seconds since the host's sampler published its latest sample.",
        ages,
    )
    return lines


LAUNCH_HISTOGRAM_SQL = """
    WITH steps AS (
        SELECT to_status, created_at,
               LAG(to_status) OVER w AS before, LAG(created_at) OVER w AS before_at
        FROM rentals_instanceevent
        WHERE kind = 'transition' AND to_status IN ('pending', 'running')
        WINDOW w AS (PARTITION BY instance_id ORDER BY created_at, id)
    ), launches AS (
        SELECT EXTRACT(EPOCH FROM created_at - before_at) AS seconds
        FROM steps WHERE to_status = 'running' AND before = 'pending'
    )
    SELECT {buckets}, COUNT(*), COALESCE(SUM(seconds), 0) FROM launches
"""


def launch_histogram() -> tuple[list[int], int, float]:
    """Launch durations (a pending transition to the running one after it: launches and
    starts), counted in the database: (cumulative count per bucket, count, sum of seconds)."""
    buckets = ", ".join("COUNT(*) FILTER (WHERE seconds <= %s)" for _ in LAUNCH_BUCKETS)
    with connection.cursor() as cursor:
        cursor.execute(LAUNCH_HISTOGRAM_SQL.format(buckets=buckets), LAUNCH_BUCKETS)
        *counts, total, seconds = cursor.fetchone()
    return counts, total, float(seconds)


def fleet_lines() -> list[str]:
    counts = dict.fromkeys(InstanceStatus.values, 0)
    for status, n in Instance.objects.order_by().values_list("status").annotate(n=Count("id")):
        counts[status] = n
    lines = family(
        "gpurental_instances",
        "gauge",
        "Instances by status.",
        [(labels(status=s), n) for s, n in counts.items()],
    )
    transitions = InstanceEvent.objects.filter(kind=InstanceEvent.Kind.TRANSITION)
    lines += family(
        "gpurental_instance_launches_total",
        "counter",
        "Launches and restarts from stopped (transitions to pending).",
        [("", transitions.filter(to_status=InstanceStatus.PENDING).count())],
    )
    lines += family(
        "gpurental_instance_failures_total",
        "counter",
        "Instances that failed to start (transitions to failed).",
        [("", transitions.filter(to_status=InstanceStatus.FAILED).count())],
    )
    counts, total, seconds = launch_histogram()
    buckets = [(labels(le=str(b)), n) for b, n in zip(LAUNCH_BUCKETS, counts, strict=True)]
    buckets.append((labels(le="+Inf"), total))
    name = "gpurental_instance_launch_duration_seconds"
    lines += [
        f"# HELP {name} Seconds from pending to running.",
        f"# TYPE {name} histogram",
    ]
    lines += [f"{name}_bucket{label} {n}" for label, n in buckets]
    lines += [f"{name}_sum {number(round(seconds, 3))}", f"{name}_count {total}"]
    return lines


def host_lines(*, now: float) -> list[str]:
    """How long ago each host's last heartbeat was sent: alert on it before hosts go offline."""
    hosts = Host.objects.order_by("name").values_list("name", "status", "last_heartbeat_at")
    return family(
        "gpurental_host_heartbeat_age_seconds",
        "gauge",
        "Seconds since the host's agent sent its last heartbeat (+Inf: never).",
        [
            (
                labels(host=name, status=status),
                round(max(0.0, now - beat.timestamp()), 3) if beat else float("inf"),
            )
            for name, status, beat in hosts
        ],
    )


def render(now: float | None = None) -> str:
    now = time.time() if now is None else now
    return "\n".join(gpu_lines(now=now) + host_lines(now=now) + fleet_lines()) + "\n"
