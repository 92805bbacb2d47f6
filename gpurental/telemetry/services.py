"""Telemetry writes: per-minute rollups from agents, hourly rollups of those, their\nretention (whole days of partitions, see partitions.py), the idle policy."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max
from psycopg.types.range import Range

from gpurental.fleet.models import Host
from gpurental.notifications.services import notify
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.services.lifecycle import instance_notice, instance_stop
from gpurental.telemetry import partitions
from gpurental.telemetry.models import GpuHour, GpuMinute
from gpurental.telemetry.selectors import BoolOr

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
# A batch row may describe a minute this far in the future (clock skew between hosts).
FUTURE_SLACK = timedelta(minutes=2)


# --- rollups --------------------------------------------------------------------


def _number(value, *, low: float = 0.0, high: float = math.inf) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number):
        return None
    return max(low, min(high, number))


def _clean(row: dict, *, gpu_indices: set[int], oldest: datetime, newest: datetime) -> dict | None:
    """One batch row as model fields, or None when it is not believable."""
    try:
        minute = datetime.fromtimestamp(int(row["minute"]) // 60 * 60, tz=UTC)
        index = int(row["gpu"])
        samples = int(row["n"])
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return None
    util_avg = _number(row.get("util_avg"), high=100)
    if index not in gpu_indices or not (oldest <= minute <= newest) or util_avg is None:
        return None
    kernel = row.get("kernel_active")
    return {
        "gpu_index": index,
        "minute": minute,
        "samples": max(1, min(samples, 32767)),
        "util_avg": util_avg,
        "util_max": _number(row.get("util_max"), high=100) or util_avg,
        "mem_used_avg": int(_number(row.get("mem_avg")) or 0),
        "mem_used_max": int(_number(row.get("mem_max")) or 0),
        "mem_total": int(_number(row.get("mem_total")) or 0),
        "temp_max": _number(row.get("temp_max"), low=-50, high=200),
        "power_avg": _number(row.get("power_avg"), high=10_000),
        "kernel_active": kernel if isinstance(kernel, bool) else None,
    }


def _holders(host: Host, lo: datetime, hi: datetime) -> dict[int, list[tuple[Range, str]]]:
    """Per GPU index of ``host``: the instance allocations overlapping [lo, hi)."""
    found: dict[int, list[tuple[Range, str]]] = {}
    rows = Allocation.objects.filter(
        gpu__host=host, instance__isnull=False, period__overlap=Range(lo, hi, "[)")
    ).values_list("gpu__index", "period", "instance_id")
    for index, period, instance_id in rows:
        found.setdefault(index, []).append((period, str(instance_id)))
    return found


def _holder_at(periods: list[tuple[Range, str]], minute: datetime) -> str | None:
    """Who held the GPU in the middle of the minute (a GPU changes hands at most once a minute)."""
    middle = minute + MINUTE / 2
    for period, instance_id in periods:
        if period.lower <= middle and (period.upper is None or middle < period.upper):
            return instance_id
    return None


def rollups_record(*, host: Host, minutes: list[dict], simulated: bool, now: datetime) -> int:
    """Upsert an agent's finished minutes (a repeated batch rewrites the same rows)."""
    gpu_indices = set(host.gpus.values_list("index", flat=True))
    oldest = now - timedelta(days=settings.TELEMETRY_RETENTION_DAYS)
    cleaned = [
        row
        for raw in minutes[: settings.TELEMETRY_MAX_BATCH_ROWS]
        if isinstance(raw, dict)
        and (row := _clean(raw, gpu_indices=gpu_indices, oldest=oldest, newest=now + FUTURE_SLACK))
    ]
    if not cleaned:
        return 0
    lo = min(r["minute"] for r in cleaned)
    hi = max(r["minute"] for r in cleaned) + MINUTE
    holders = _holders(host, lo, hi)
    objs = [
        GpuMinute(
            host=host,
            simulated=simulated,
            instance_id=_holder_at(holders.get(row["gpu_index"], []), row["minute"]),
            **row,
        )
        for row in cleaned
    ]
    GpuMinute.objects.bulk_create(
        objs,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["host", "gpu_index", "minute"],
        update_fields=[
            "instance",
            "samples",
            "util_avg",
            "util_max",
            "mem_used_avg",
            "mem_used_max",
            "mem_total",
            "temp_max",
            "power_avg",
            "kernel_active",
            "simulated",
        ],
    )
    return len(objs)


def rollups_expire(*, now: datetime, days: int | None = None, batch: int = 10_000) -> int:
    """Drop the days of per-minute rollups older than the retention (whole partitions),
    and delete such rows from the default partition in short batches. Returns the rows
    deleted from the default partition; the days dropped are logged."""
    days = settings.TELEMETRY_RETENTION_DAYS if days is None else days
    dropped, deleted = partitions.partitions_drop_before(now - timedelta(days=days), batch=batch)
    if dropped:
        log.info(
            "dropped %d day(s) of GPU minutes: %s to %s", len(dropped), dropped[0], dropped[-1]
        )
    return deleted


# Hours re-rolled each pass: batches an agent replays late (its outbox) up to this long
# after the hour still reach the hour's rollup.
HOURS_REROLLED = 3


def hours_rollup(*, now: datetime, hours: int = HOURS_REROLLED) -> int:
    """(Re)make the ``GpuHour`` rows of the last ``hours`` complete hours from their minutes:
    one INSERT … SELECT … GROUP BY, upserted, so a pass run twice writes the same rows."""
    until = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    since = until - timedelta(hours=hours)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO "{GpuHour._meta.db_table}" AS h (host_id, gpu_index, hour, instance_id,
                minutes, util_avg, util_max, mem_used_avg, mem_used_max, mem_total, temp_max,
                power_avg, simulated)
            SELECT host_id, gpu_index, date_trunc('hour', minute, 'UTC'), instance_id,
                count(*), avg(util_avg), max(util_max), avg(mem_used_avg)::bigint,
                max(mem_used_max), max(mem_total), max(temp_max), avg(power_avg), bool_or(simulated)
            FROM "{GpuMinute._meta.db_table}"
            WHERE minute >= %s AND minute < %s
            GROUP BY 1, 2, 3, 4
            ON CONFLICT ON CONSTRAINT gpuhour_one_per_gpu_hour_and_holder DO UPDATE SET
                minutes = EXCLUDED.minutes, util_avg = EXCLUDED.util_avg,
                util_max = EXCLUDED.util_max, mem_used_avg = EXCLUDED.mem_used_avg,
                mem_used_max = EXCLUDED.mem_used_max, mem_total = EXCLUDED.mem_total,
                temp_max = EXCLUDED.temp_max, power_avg = EXCLUDED.power_avg,
                simulated = EXCLUDED.simulated
            """,  # noqa: S608 - the models' own table names
            [since, until],
        )
        return cursor.rowcount


def hours_expire(*, now: datetime, batch: int = 10_000) -> int:
    """Delete hourly rollups older than ``TELEMETRY_HOURLY_RETENTION_DAYS``, in batches."""
    cutoff = now - timedelta(days=settings.TELEMETRY_HOURLY_RETENTION_DAYS)
    deleted = 0
    while True:
        ids = list(GpuHour.objects.filter(hour__lt=cutoff).values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += GpuHour.objects.filter(pk__in=ids).delete()[0]


def telemetry_maintain(*, now: datetime) -> dict[str, int]:
    """The hourly job: the next days' partitions, the last hours' rollups, the retention."""
    made = partitions.partitions_ensure(now=now, ahead=settings.TELEMETRY_PARTITIONS_AHEAD)
    return {
        "partitions_made": len(made),
        "hours_rolled": hours_rollup(now=now),
        "minutes_deleted": rollups_expire(now=now),
        "hours_deleted": hours_expire(now=now),
    }


# --- idle auto-stop -------------------------------------------------------------


def idle_streak(*, instance: Instance, now: datetime, limit: int) -> int | None:
    """How many whole minutes, up to the newest one recorded, the instance's GPUs were idle.

    A minute is idle when every GPU of the instance averaged under the idle threshold
    and no JupyterLab kernel was active. The streak counts back from the newest
    recorded minute and stops at the first busy or missing minute, or at the start
    of the current run. None when there is no recent data: unknown is never "idle".
    """
    since = instance.running_since or instance.status_changed_at
    rows = list(
        GpuMinute.objects.filter(instance=instance, minute__gte=since - MINUTE)
        .values("minute")
        .annotate(util=Max("util_avg"), kernel=BoolOr("kernel_active"), gpus=Count("id"))
        .order_by("-minute")[: limit + 1]
    )
    # Batches arrive every minute or so: the newest minute may be a couple of minutes old.
    if not rows or rows[0]["minute"] < now - timedelta(minutes=settings.IDLE_DATA_LAG_MINUTES):
        return None
    threshold = settings.IDLE_UTILIZATION_PERCENT
    streak, expected = 0, rows[0]["minute"]
    for row in rows:
        if row["minute"] != expected or row["minute"] < since - MINUTE:
            break
        if row["util"] >= threshold or row["kernel"] or row["gpus"] < instance.gpu_count:
            break
        streak += 1
        expected -= MINUTE
    return streak


def warning_lead(minutes: int) -> int:
    """Minutes of notice before an idle stop: IDLE_WARNING_MINUTES, at most half the policy."""
    return min(settings.IDLE_WARNING_MINUTES, minutes // 2)


def instance_idle_check(*, instance: Instance, now: datetime) -> str:
    """Apply the idle policy to one running instance: "", "warned", "stopped" or "cleared"."""
    limit = instance.idle_stop_minutes
    if not limit or instance.status != InstanceStatus.RUNNING:
        return ""
    lead = warning_lead(limit)
    streak = idle_streak(instance=instance, now=now, limit=limit)
    if streak is None:
        return ""  # no recent measurements (agent down?): neither idle nor busy
    run_start = instance.running_since or instance.status_changed_at
    warned = instance.idle_warned_at is not None and instance.idle_warned_at >= run_start
    if streak < limit - lead:
        if instance.idle_warned_at is not None:
            # Busy again (or a new run): forget the warning, and say so if it was for this run.
            cleared = Instance.objects.filter(
                pk=instance.pk, idle_warned_at=instance.idle_warned_at
            ).update(idle_warned_at=None)
            if cleared and warned:
                with transaction.atomic():
                    instance_notice(
                        instance,
                        step="idle_cleared",
                        reason="GPU activity resumed: the idle auto-stop is cancelled",
                        now=now,
                    )
                return "cleared"
        return ""
    if not warned:
        stop_at = now + timedelta(minutes=lead)
        with transaction.atomic():
            # Filtered on the old value: two checkers never warn twice.
            if not Instance.objects.filter(
                pk=instance.pk, idle_warned_at=instance.idle_warned_at
            ).update(idle_warned_at=now):
                return ""
            instance_notice(
                instance,
                step="idle_warning",
                reason=(
                    f"The GPUs have been idle (under {settings.IDLE_UTILIZATION_PERCENT} %) "
                    f"for {streak} minutes: this instance will be stopped at "
                    f"{stop_at:%H:%M} UTC unless they get busy. /workspace is kept."
                ),
                now=now,
                stop_at=stop_at.isoformat(),
                idle_minutes=streak,
            )
            transaction.on_commit(
                lambda: notify(
                    instance.user,
                    "idle_warning",
                    instance=instance,
                    stop_at=stop_at,
                    idle_minutes=streak,
                )
            )
        if lead > 0:
            return "warned"
        warned = True
        instance.idle_warned_at = now
    if streak >= limit and now - instance.idle_warned_at >= timedelta(minutes=lead) - MINUTE / 2:
        stopped = instance_stop(
            instance=instance,
            reason=(
                f"idle for {streak} minutes (GPU utilisation under "
                f"{settings.IDLE_UTILIZATION_PERCENT} %, policy: stop after {limit} minutes); "
                "/workspace kept"
            ),
            now=now,
        )
        transaction.on_commit(
            lambda: notify(stopped.user, "idle_stopped", instance=stopped, idle_minutes=streak)
        )
        return "stopped"
    return ""


def idle_instances_check(*, now: datetime) -> dict[str, int]:
    """The beat job: every running instance with an idle policy."""
    outcomes: dict[str, int] = {}
    # Without GPUs (no-GPU mode) there is no GPU to be idle: such a run is cheap and stopped
    # by its customer.
    candidates = Instance.objects.filter(
        status=InstanceStatus.RUNNING, idle_stop_minutes__gt=0, without_gpus=False
    ).select_related("host")
    for instance in candidates.iterator():
        try:
            outcome = instance_idle_check(instance=instance, now=now)
        except Exception:  # one bad row must not stop the policy for the others
            log.exception("idle check of %s failed", instance.pk)
            outcome = "error"
        if outcome:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes
