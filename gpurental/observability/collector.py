"""The ``/metrics`` exposition: a prometheus_client collector that reads the shared state
(PostgreSQL, Redis, the broker) on each scrape, so every web process answers alike.

Per-GPU series carry NVIDIA dcgm-exporter's names, units and labels (``gpu``, ``UUID``,
``device``, ``modelName``, ``Hostname``) so its Grafana dashboard and the usual alert
rules work unchanged, plus ours: ``host``, ``instance_id``, ``customer`` (the renter's
opaque user id) and ``simulated``. No label is one Prometheus reserves (``instance``,
``job``, ``__*``): Prometheus sets ``instance`` to the scrape target, as for DCGM.
The control plane's own series are ``gpurental_*``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import connection
from django.db.models import Count, F
from django.db.models.functions import Coalesce, Now
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from gpurental import protocol
from gpurental.fleet.models import GPU, Host, HostStatus
from gpurental.observability import counters, queues
from gpurental.rentals.models import Allocation, Instance, InstanceEvent, InstanceStatus
from gpurental.rentals.selectors import HELD, HOLDING
from gpurental.telemetry.selectors import latest_samples

log = logging.getLogger(__name__)

MIB = 1024 * 1024
DCGM_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
OUR_LABELS = ["host", "instance_id", "customer", "simulated"]
# (name, sample key, help, scale): dcgm-exporter's own units (framebuffer in MiB).
DCGM_GAUGES = (
    ("DCGM_FI_DEV_GPU_UTIL", "util", "GPU utilization (in %).", 1),
    ("DCGM_FI_DEV_FB_USED", "mem_used", "Framebuffer memory used (in MiB).", 1 / MIB),
    ("DCGM_FI_DEV_GPU_TEMP", "temp", "GPU temperature (in C).", 1),
    ("DCGM_FI_DEV_POWER_USAGE", "power", "Power draw (in W).", 1),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock", "SM clock frequency (in MHz).", 1),
)
LAUNCH_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
RESERVED_LABELS = {"instance", "job"}


def _gpu_rows() -> dict[tuple[str, int], dict]:
    """(host, index) → the GPU's UUID and model name, and who holds it now."""
    rows = {
        (host, index): {"uuid": uuid, "model": (nvml or [None])[0] or name}
        for host, index, uuid, nvml, name in GPU.objects.values_list(
            "host__name", "index", "uuid", "model__nvml_names", "model__name"
        )
    }
    held = Allocation.objects.filter(HELD, instance__status__in=HOLDING).values_list(
        "gpu__host__name", "gpu__index", "instance_id", "instance__user_id"
    )
    for host, index, iid, user_id in held:
        rows.setdefault((host, index), {}).update(instance_id=str(iid), customer=str(user_id))
    return rows


def gpu_families(*, now: float) -> list[Metric]:
    hosts = list(Host.objects.order_by("name").values_list("name", flat=True))
    latest = latest_samples(hosts=hosts)
    rows = _gpu_rows()
    labels = DCGM_LABELS + OUR_LABELS
    gauges = {
        name: GaugeMetricFamily(name, help_text, labels=labels)
        for name, _, help_text, _ in DCGM_GAUGES
    }
    free = GaugeMetricFamily(
        "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=labels
    )
    age = GaugeMetricFamily(
        "gpurental_host_sample_age_seconds",
        "Seconds since the host's sampler published its latest sample.",
        labels=["host"],
    )
    for host in hosts:
        message = latest.get(host)
        if not message:
            continue
        age.add_metric([host], round(max(0.0, now - float(message.get("ts", now))), 3))
        for sample in message.get("gpus", []):
            if sample.get("stale"):
                continue
            index = sample.get("index")
            row = rows.get((host, index), {})
            values = [
                str(index),
                row.get("uuid", ""),
                f"nvidia{index}",
                row.get("model", ""),
                host,
                host,
                row.get("instance_id", ""),
                row.get("customer", ""),
                "true" if message.get("simulated") else "false",
            ]
            for name, key, _, scale in DCGM_GAUGES:
                if sample.get(key) is not None:
                    gauges[name].add_metric(values, sample[key] * scale)
            if sample.get("mem_total") is not None and sample.get("mem_used") is not None:
                free.add_metric(values, (sample["mem_total"] - sample["mem_used"]) / MIB)
    return [*gauges.values(), free, age]


def host_families(*, now: float) -> list[Metric]:
    beat_age = GaugeMetricFamily(
        "gpurental_host_heartbeat_age_seconds",
        "Seconds since the host's agent sent its last heartbeat (+Inf: never).",
        labels=["host"],
    )
    status = GaugeMetricFamily(
        "gpurental_host_status",
        "1 for the host's current status (active, draining, maintenance, offline).",
        labels=["host", "status"],
    )
    for name, current, beat in Host.objects.order_by("name").values_list(
        "name", "status", "last_heartbeat_at"
    ):
        beat_age.add_metric(
            [name], round(max(0.0, now - beat.timestamp()), 3) if beat else float("inf")
        )
        for value in HostStatus.values:
            status.add_metric([name, value], 1.0 if value == current else 0.0)
    return [beat_age, status]


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
    starts), from the instance events: (cumulative count per bucket, count, sum)."""
    buckets = ", ".join("COUNT(*) FILTER (WHERE seconds <= %s)" for _ in LAUNCH_BUCKETS)
    with connection.cursor() as cursor:
        cursor.execute(LAUNCH_HISTOGRAM_SQL.format(buckets=buckets), LAUNCH_BUCKETS)
        *counts, total, seconds = cursor.fetchone()
    return counts, total, float(seconds)


def meter_lag_seconds() -> float:
    """How far behind the meter is: the oldest unbilled start among running, metered
    instances (0 when nothing runs). Closed minutes only are billed, so ~60 s is normal."""
    oldest = (
        Instance.objects.filter(
            status=InstanceStatus.RUNNING, reservation__isnull=True, running_since__isnull=False
        )
        .annotate(since=Coalesce("billed_until", "running_since"))
        .order_by("since")
        .values_list(Now() - F("since"), flat=True)
        .first()
    )
    return max(0.0, oldest.total_seconds()) if oldest is not None else 0.0


def fleet_families() -> list[Metric]:
    counts = dict.fromkeys(InstanceStatus.values, 0)
    for status, n in Instance.objects.order_by().values_list("status").annotate(n=Count("id")):
        counts[status] = n
    instances = GaugeMetricFamily("gpurental_instances", "Instances by status.", labels=["status"])
    for status, n in counts.items():
        instances.add_metric([status], n)
    transitions = InstanceEvent.objects.filter(kind=InstanceEvent.Kind.TRANSITION)
    launches = CounterMetricFamily(
        "gpurental_instance_launches",
        "Launches and restarts from stopped (transitions to pending).",
        value=transitions.filter(to_status=InstanceStatus.PENDING).count(),
    )
    failures = CounterMetricFamily(
        "gpurental_instance_failures",
        "Instances that failed to start (transitions to failed).",
        value=transitions.filter(to_status=InstanceStatus.FAILED).count(),
    )
    counts_le, total, seconds = launch_histogram()
    buckets = [(str(b), n) for b, n in zip(LAUNCH_BUCKETS, counts_le, strict=True)]
    launch = HistogramMetricFamily(
        "gpurental_instance_launch_duration_seconds",
        "Seconds from pending to running.",
        buckets=[*buckets, ("+Inf", total)],
        sum_value=round(seconds, 3),
    )
    lag = GaugeMetricFamily(
        "gpurental_meter_lag_seconds",
        "Seconds of running time not yet billed, for the instance furthest behind.",
        value=round(meter_lag_seconds(), 3),
    )
    return [instances, launches, failures, launch, lag]


def queue_families(*, now: float) -> list[Metric]:
    depth = GaugeMetricFamily(
        "gpurental_queue_messages", "Messages waiting in the Celery queue.", labels=["queue"]
    )
    age = GaugeMetricFamily(
        "gpurental_queue_oldest_message_age_seconds",
        "Age of the oldest waiting message (Redis broker only; 0 when the queue is empty).",
        labels=["queue"],
    )
    names = [protocol.CONTROL_QUEUE] + [
        protocol.host_queue(n) for n in Host.objects.order_by("name").values_list("name", flat=True)
    ]
    try:
        states = queues.queue_states(settings.CELERY_BROKER_URL, names, now=now)
    except Exception:  # noqa: BLE001 - a broker down must not take the other series with it
        log.warning("cannot read queue depths from the broker", exc_info=True)
        states = []
    for state in states:
        depth.add_metric([state.queue], state.messages)
        if state.oldest_age_s is not None:
            age.add_metric([state.queue], round(state.oldest_age_s, 3))
    up = GaugeMetricFamily(
        "gpurental_broker_up", "1 when the broker answered this scrape.", value=1 if states else 0
    )
    return [depth, age, up]


def task_families() -> list[Metric]:
    runs = CounterMetricFamily(
        "gpurental_celery_task_runs", "Celery task runs, any outcome.", labels=["task"]
    )
    failures = CounterMetricFamily(
        "gpurental_celery_task_failures", "Celery task runs that raised.", labels=["task"]
    )
    duration = HistogramMetricFamily(
        "gpurental_celery_task_duration_seconds",
        "Celery task run time (reconcile: gpurental.rentals.tasks.reconcile, "
        "meter: gpurental.billing.tasks.meter).",
        labels=["task"],
    )
    sockets = GaugeMetricFamily(
        "gpurental_websocket_connections", "Open websocket connections.", labels=["stream"]
    )
    try:
        run_counts, failure_counts, durations = counters.task_counts()
        open_sockets = counters.websocket_counts()
    except Exception:  # noqa: BLE001 - Redis down: say nothing rather than zeros
        log.warning("cannot read the task and websocket counts from Redis", exc_info=True)
        return [runs, failures, duration, sockets]
    for task, n in sorted(run_counts.items()):
        runs.add_metric([task], n)
        failures.add_metric([task], failure_counts.get(task, 0))
    for task, fields in sorted(durations.items()):
        buckets = [(str(b), fields.get(str(b), 0.0)) for b in counters.DURATION_BUCKETS]
        buckets.append(("+Inf", fields.get("count", 0.0)))
        duration.add_metric([task], buckets, fields.get("sum", 0.0))
    for stream, n in sorted(open_sockets.items()):
        sockets.add_metric([stream], n)
    return [runs, failures, duration, sockets]


def group_families() -> list[Metric]:
    """Elastic groups: replicas by role, and what each group's endpoint measured over the
    last minute (gpurental/groups/load.py, written by every gateway process)."""
    from gpurental.groups.load import load_of
    from gpurental.groups.models import Group

    labels = ["group_id", "customer"]
    replicas = GaugeMetricFamily(
        "gpurental_group_replicas",
        "Replicas of an elastic group by role (serving, warm, draining) and state.",
        labels=[*labels, "role", "status"],
    )
    rps = GaugeMetricFamily(
        "gpurental_group_requests_per_second", "Requests answered per second (60 s).", labels=labels
    )
    p50 = GaugeMetricFamily(
        "gpurental_group_latency_p50_seconds", "Request latency, median (60 s).", labels=labels
    )
    p99 = GaugeMetricFamily(
        "gpurental_group_latency_p99_seconds",
        "Request latency, 99th percentile (60 s).",
        labels=labels,
    )
    queued = GaugeMetricFamily(
        "gpurental_group_queued_requests", "Requests waiting for a replica now.", labels=labels
    )
    errors = GaugeMetricFamily(
        "gpurental_group_errors", "Failed or refused requests in the last 60 s.", labels=labels
    )
    families = [replicas, rps, p50, p99, queued, errors]
    groups = Group.objects.exclude(status=Group.Status.DELETED).values_list("pk", "user_id")
    for group_id, user_id in groups:
        key = [str(group_id), str(user_id)]
        by_role = (
            Instance.objects.filter(group_id=group_id)
            .exclude(status=InstanceStatus.TERMINATED)
            .order_by()
            .values_list("group_role", "status")
            .annotate(n=Count("id"))
        )
        for role, status, n in by_role:
            replicas.add_metric([*key, role, status], n)
        try:
            load = load_of(group_id)
        except Exception:  # noqa: BLE001 - Redis down: the replica counts still stand
            log.warning("cannot read the load of group %s from Redis", group_id, exc_info=True)
            continue
        rps.add_metric(key, round(load.rps, 3))
        queued.add_metric(key, load.queued_now)
        errors.add_metric(key, load.errors)
        if load.p50_ms is not None:
            p50.add_metric(key, round(load.p50_ms / 1000, 6))
        if load.p99_ms is not None:
            p99.add_metric(key, round(load.p99_ms / 1000, 6))
    return families


def gateway_families() -> list[Metric]:
    """The instance gateway, summed over its live processes (gpurental/gateway/stats.py)."""
    from gpurental.gateway.stats import BUCKETS, gateway_totals
    from gpurental.telemetry.selectors import _redis

    requests = CounterMetricFamily(
        "gpurental_gateway_requests",
        "Requests the instance gateway answered, by status class (summed over its processes).",
        labels=["code"],
    )
    duration = HistogramMetricFamily(
        "gpurental_gateway_request_duration_seconds",
        "How long the instance gateway took to answer, to the end of the response.",
    )
    sockets = GaugeMetricFamily(
        "gpurental_gateway_websockets", "Websockets open through the instance gateway now."
    )
    processes = GaugeMetricFamily(
        "gpurental_gateway_processes", "Instance gateway processes that reported in 30 s."
    )
    try:
        totals, live = gateway_totals(_redis())
    except Exception:  # noqa: BLE001 - Redis down: say nothing rather than zeros
        log.warning("cannot read the gateway's stats from Redis", exc_info=True)
        return [requests, duration, sockets, processes]
    for code, n in sorted(totals.requests.items()):
        requests.add_metric([code], n)
    cumulative, buckets = 0, []
    for bound, n in zip([*map(str, BUCKETS), "+Inf"], totals.buckets, strict=True):
        cumulative += n
        buckets.append((bound, cumulative))
    duration.add_metric([], buckets, round(totals.seconds, 6))
    sockets.add_metric([], totals.websockets)
    processes.add_metric([], live)
    return [requests, duration, sockets, processes]


class PlatformCollector:
    def collect(self) -> Iterator[Metric]:
        now = time.time()
        yield from gpu_families(now=now)
        yield from host_families(now=now)
        yield from fleet_families()
        yield from queue_families(now=now)
        yield from task_families()
        yield from group_families()
        yield from gateway_families()


def render() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlatformCollector())
    return generate_latest(registry)
