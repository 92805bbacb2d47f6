"""GpuMinute at fleet size: one partition a day, made ahead, dropped whole past the
retention; hourly rollups kept longer, and the 30-day chart drawn from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from gpurental.telemetry import partitions, tasks
from gpurental.telemetry.models import GpuHour, GpuMinute
from gpurental.telemetry.selectors import instance_history
from gpurental.telemetry.services import hours_rollup, rollups_expire, rollups_record
from tests.telemetry.test_rollups import row

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def stored_in() -> dict[datetime, str]:
    """Each row's minute → the partition (table) PostgreSQL put it in."""
    with connection.cursor() as cursor:
        cursor.execute('SELECT minute, tableoid::regclass::text FROM "telemetry_gpuminute"')
        return dict(cursor.fetchall())


def test_the_table_is_partitioned_by_day_and_the_next_days_exist_after_migrate():
    assert partitions.is_partitioned()
    today = datetime.now(UTC).date()
    days = set(partitions.partition_days())
    assert {today, today + timedelta(days=1)} <= days
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE c.relname = %s",
            [partitions.partition_name(today)],
        )
        (bound,) = cursor.fetchone()
    assert f"FROM ('{today:%Y-%m-%d} 00:00:00+00')" in bound


def test_a_row_goes_to_its_days_partition_or_the_default_one(node1):
    partitions.partition_create(T0.date())
    rollups_record(
        host=node1,
        minutes=[row(T0, 0, 10), row(T0 + timedelta(days=1), 0, 20)],
        simulated=True,
        now=T0 + timedelta(days=1, minutes=5),
    )
    assert stored_in() == {
        T0: "telemetry_gpuminute_p20260302",
        T0 + timedelta(days=1): "telemetry_gpuminute_default",
    }


def test_making_a_days_partition_moves_its_rows_out_of_the_default_one(node1):
    rollups_record(
        host=node1,
        minutes=[row(T0, 0, 10), row(T0, 1, 30), row(T0 + timedelta(days=1), 0, 20)],
        simulated=True,
        now=T0 + timedelta(days=1, minutes=5),
    )
    assert partitions.partition_create(T0.date()) == 2
    assert partitions.partition_create(T0.date()) == 0  # made already: nothing to do
    assert set(stored_in().values()) == {
        "telemetry_gpuminute_p20260302",
        "telemetry_gpuminute_default",
    }
    # Upserts still find the moved rows (the unique constraint spans the partitions).
    rollups_record(host=node1, minutes=[row(T0, 0, 90)], simulated=True, now=T0)
    assert GpuMinute.objects.get(minute=T0, gpu_index=0).util_avg == 90
    assert GpuMinute.objects.count() == 3


def test_retention_drops_whole_days_and_old_rows_of_the_default_partition(node1, settings):
    old, recent = T0 - timedelta(days=95), T0 - timedelta(days=10)
    for day in (old, recent):
        partitions.partition_create(day.date())
    stray = T0 - timedelta(days=120)  # a day without a partition: in the default one
    settings.TELEMETRY_RETENTION_DAYS = 365  # the rows are taken...
    rollups_record(
        host=node1,
        minutes=[row(old, 0, 1), row(old, 1, 1), row(recent, 0, 1), row(stray, 0, 1)],
        simulated=True,
        now=T0,
    )
    settings.TELEMETRY_RETENTION_DAYS = 90  # ...and then kept 90 days
    assert rollups_expire(now=T0) == 1  # the stray row, deleted from the default partition
    assert old.date() not in partitions.partition_days()  # dropped whole
    assert recent.date() in partitions.partition_days()
    assert list(GpuMinute.objects.values_list("minute", flat=True)) == [recent]


def test_hourly_rollups_weigh_each_holder_apart_and_a_rerun_rewrites_the_same_rows(
    node1, alice, run_instance
):
    mine = run_instance(alice, now=T0)
    (gpu,) = mine.gpu_indices
    minutes = [row(T0 + timedelta(minutes=m), gpu, 20 if m < 30 else 80) for m in range(60)]
    minutes += [row(T0 + timedelta(hours=1, minutes=m), gpu, 50) for m in range(10)]
    rollups_record(host=node1, minutes=minutes, simulated=True, now=T0 + timedelta(hours=2))
    assert hours_rollup(now=T0 + timedelta(hours=2, minutes=5)) == 2
    assert hours_rollup(now=T0 + timedelta(hours=2, minutes=5)) == 2  # upserted, not added
    first, second = GpuHour.objects.order_by("hour")
    assert (first.hour, first.minutes, first.util_avg, first.instance_id) == (T0, 60, 50, mine.pk)
    assert (second.minutes, second.util_avg) == (10, 50)
    assert first.util_max == 85 and first.simulated

    # The 30-day chart reads the hours: one 6-hour point, weighed by minutes.
    history = instance_history(instance=mine, window="30d", now=T0 + timedelta(days=1))
    (points,) = [g["points"] for g in history["gpus"]]
    assert history["bucket_seconds"] == 6 * 3600
    assert [(p["t"], p["util"]) for p in points] == [("2026-03-02T06:00:00+00:00", 50.0)]


def test_the_hourly_task_makes_partitions_rolls_hours_and_expires(node1, settings, caplog):
    settings.TELEMETRY_HOURLY_RETENTION_DAYS = 365
    GpuHour.objects.create(
        host=node1,
        gpu_index=0,
        hour=datetime.now(UTC) - timedelta(days=400),
        minutes=60,
        util_avg=1,
        util_max=1,
        mem_used_avg=0,
        mem_used_max=0,
        mem_total=1,
    )
    caplog.set_level("INFO", logger="gpurental.telemetry.tasks")
    tasks.maintain()
    assert "'hours_deleted': 1" in caplog.text
    assert not GpuHour.objects.exists()
    today = datetime.now(UTC).date()
    assert (
        today + timedelta(days=settings.TELEMETRY_PARTITIONS_AHEAD) in partitions.partition_days()
    )
