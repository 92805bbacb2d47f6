"""GPU minutes at fleet size: a day of per-minute rollups for N hosts × 8 GPUs in the
partitioned ``GpuMinute`` table, and the reads and maintenance on it.

    .venv/bin/python bench/telemetry_store.py [--hosts 1000] [--runs 200] [--smoke]

Loads 24 h × 60 minutes × 8 GPUs per host (11.5 M rows at 1,000 hosts) with PostgreSQL's
own INSERT … SELECT over generate_series, one hour at a time, into the two days'
partitions; each host's GPU 0 is held by its running instance. Then prints:

- the load's rows/s and the table's size on disk;
- p50/p99 of the 24 h chart (``instance_history(window="24h")``, what the console's chart
  asks for), of the 1 h chart, and of paid vs used (``instance_usage``), each for random
  instances;
- the hourly rollup of the day (``hours_rollup``) and the 30-day chart read from it;
- the retention: dropping the two days (``rollups_expire``), against deleting the same
  number of rows from a plain table (one hour's worth, scaled).

A report, never a test: nothing here fails because this machine is slow.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import percentile, setup_django  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=200, help="reads of each kind")
    parser.add_argument("--smoke", action="store_true", help="20 hosts, 40 reads: it still runs")
    args = parser.parse_args()
    hosts, runs = (20, 40) if args.smoke else (args.hosts, args.runs)
    var = Path(tempfile.mkdtemp(prefix="gpurental-bench-telemetry-store-"))
    try:
        return run(var, hosts, runs)
    finally:
        from gpurental import embedded

        embedded.stop(var)  # its own servers (none under make bench-smoke: shared ones)
        shutil.rmtree(var, ignore_errors=True)


LOAD_HOUR = """
INSERT INTO telemetry_gpuminute (host_id, gpu_index, minute, instance_id, samples, util_avg,
    util_max, mem_used_avg, mem_used_max, mem_total, temp_max, power_avg, kernel_active,
    simulated)
SELECT h.id, g, m, CASE WHEN g = 0 THEN i.id END, 60, random() * 100, 100,
    20000000000, 30000000000, 85899345920, 60, 250, NULL, true
FROM fleet_host h
LEFT JOIN rentals_instance i ON i.host_id = h.id
CROSS JOIN generate_series(0, 7) AS g
CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz, '1 minute') AS m
"""


def timed(fn, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - started))
    return times


def line(label: str, times: list[float]) -> str:
    return (
        f"{label:<34} p50 {percentile(times, 0.5):7.1f} ms   p99 {percentile(times, 0.99):7.1f} ms"
        f"   ({len(times)} reads)"
    )


def run(var: Path, hosts: int, runs: int) -> int:
    setup_django(var, CELERY_TASK_ALWAYS_EAGER="0")
    from django.db import connection
    from django.utils import timezone

    from bench.fleet import make_fleet
    from gpurental.rentals.models import Instance
    from gpurental.telemetry import partitions
    from gpurental.telemetry.models import GpuHour, GpuMinute
    from gpurental.telemetry.selectors import instance_history, instance_usage
    from gpurental.telemetry.services import hours_rollup, rollups_expire

    started = time.monotonic()
    make_fleet(hosts)
    print(
        f"{hosts} hosts × 8 GPUs, a running instance on GPU 0 of each, made in "
        f"{time.monotonic() - started:.1f} s"
    )
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(hours=24)
    for day in {start.date(), now.date()}:
        partitions.partition_create(day)

    started = time.monotonic()
    with connection.cursor() as cursor:
        for hour in range(24):
            lo = start + timedelta(hours=hour)
            cursor.execute(LOAD_HOUR, [lo, lo + timedelta(minutes=59)])
        cursor.execute("ANALYZE telemetry_gpuminute")
        cursor.execute(
            "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits "
            "WHERE inhparent = 'telemetry_gpuminute'::regclass"
        )
        (size,) = cursor.fetchone()
    load_s = time.monotonic() - started
    rows = GpuMinute.objects.count()
    expected = hosts * 8 * 24 * 60
    print(
        f"loaded {rows:,} rows (a day) in {load_s:.1f} s ({rows / load_s:,.0f} rows/s), "
        f"{size / 2**30:.2f} GiB with indexes, in partitions {partitions.partition_days()}"
    )

    instances = list(Instance.objects.all())
    rng = random.Random(1)
    pick = lambda: rng.choice(instances)  # noqa: E731
    day = timed(lambda: instance_history(instance=pick(), window="24h", now=now), runs)
    hour = timed(lambda: instance_history(instance=pick(), window="1h", now=now), runs)
    usage = timed(lambda: instance_usage(instance=pick(), now=now), runs)
    points = instance_history(instance=instances[0], window="24h", now=now)["gpus"][0]["points"]

    started = time.monotonic()
    rolled = hours_rollup(now=now + timedelta(hours=1), hours=25)
    rollup_s = time.monotonic() - started
    month = timed(lambda: instance_history(instance=pick(), window="30d", now=now), runs)

    print(line("24 h chart (instance_history)", day) + f", {len(points)} points a GPU")
    print(line("1 h chart", hour))
    print(line("paid vs used (instance_usage)", usage))
    print(f"hourly rollup of the day: {rolled:,} GpuHour rows in {rollup_s:.1f} s")
    print(line("30 d chart (from GpuHour)", month))

    # Retention: whole days dropped, against a DELETE of one hour's rows from a plain copy.
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE bench_plain AS SELECT * FROM telemetry_gpuminute WHERE minute < %s",
            [start + timedelta(hours=1)],
        )
        cursor.execute("CREATE INDEX ON bench_plain (minute)")
        started = time.monotonic()
        cursor.execute("DELETE FROM bench_plain WHERE minute < %s", [start + timedelta(hours=1)])
        deleted_plain, delete_s = cursor.rowcount, time.monotonic() - started
        cursor.execute("DROP TABLE bench_plain")
    days = len(partitions.partition_days())
    started = time.monotonic()
    rollups_expire(now=now + timedelta(days=400))
    drop_s = time.monotonic() - started
    left = GpuMinute.objects.count()
    print(
        f"retention: the {rows:,} rows dropped as {days} day partitions in {1000 * drop_s:.0f} ms; "
        f"a DELETE of {deleted_plain:,} rows (one hour) from a plain table took "
        f"{1000 * delete_s:.0f} ms, so ~{delete_s * rows / max(1, deleted_plain):.0f} s for "
        "the day (extrapolated)"
    )
    ok = (
        rows == expected
        and len(points) == 144
        and rolled == GpuHour.objects.count() == hosts * 8 * 24
        and left == 0
    )
    print("result: " + ("as expected" if ok else f"NOT as expected ({rows} of {expected} rows)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
