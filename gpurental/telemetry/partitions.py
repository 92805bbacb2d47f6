"""``GpuMinute`` is partitioned by day (PostgreSQL's declarative RANGE partitioning).

A fleet of 1,000 hosts × 8 GPUs writes 11.5 M rows a day. With one partition a day,
the retention is a ``DROP TABLE`` of whole days instead of deleting millions of rows,
and a chart's query reads only the days it asks for.

- Each day is a partition named ``telemetry_gpuminute_pYYYYMMDD`` holding
  ``[day 00:00 UTC, next day 00:00 UTC)``; ``partitions_ensure`` makes today's and the next
  ``TELEMETRY_PARTITIONS_AHEAD`` days' ahead of time (the hourly maintenance task).
- A row for a day without a partition (the task did not run yet, a test's fixed date)
  lands in the default partition ``telemetry_gpuminute_default``: a write never fails for
  want of a partition. When that day's partition is made, its rows in the default
  partition move into it, as PostgreSQL requires (the documented detach-free way: the new
  table is filled, then attached).
- ``partitions_drop_before`` drops the days wholly older than the retention; rows that old
  in the default partition are deleted.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction

TABLE = "telemetry_gpuminute"
DEFAULT = f"{TABLE}_default"
NAME = re.compile(rf"^{TABLE}_p(\d{{8}})$")


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def _bounds(day: date) -> tuple[str, str]:
    lo = datetime.combine(day, time(), tzinfo=UTC)
    return lo.isoformat(), (lo + timedelta(days=1)).isoformat()


def is_partitioned() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
            "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            [TABLE],
        )
        return cursor.fetchone() is not None


def partition_days() -> list[date]:
    """The days that have their own partition, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        names = [name for (name,) in cursor.fetchall()]
    days = [date.fromisoformat(m.group(1)) for n in names if (m := NAME.match(n))]
    return sorted(days)


def partition_create(day: date) -> int:
    """Make ``day``'s partition if it is missing; returns the rows moved into it from the
    default partition (0 when it existed)."""
    name = partition_name(day)
    lo, hi = _bounds(day)
    with transaction.atomic(), connection.cursor() as cursor:
        # One maker at a time (two workers' maintenance tasks): a transaction-scoped lock.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [TABLE])
        cursor.execute("SELECT to_regclass(%s)", [name])
        if cursor.fetchone()[0] is not None:
            return 0
        # No writer may put a row of that day in the default partition between the move and
        # the attach (the attach would then fail): the default partition is held until the
        # commit. A writer holding it long makes this wait at most 5 s, then the next
        # hourly run tries again.
        cursor.execute("SET LOCAL lock_timeout = '5s'")
        cursor.execute(f'LOCK TABLE "{DEFAULT}" IN ACCESS EXCLUSIVE MODE')
        cursor.execute(
            f'CREATE TABLE "{name}" (LIKE "{TABLE}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
        )
        cursor.execute(
            f'WITH moved AS (DELETE FROM "{DEFAULT}" WHERE minute >= %s AND minute < %s '  # noqa: S608 - our own names
            f'RETURNING *) INSERT INTO "{name}" SELECT * FROM moved',
            [lo, hi],
        )
        moved = cursor.rowcount
        cursor.execute(
            f'ALTER TABLE "{TABLE}" ATTACH PARTITION "{name}" FOR VALUES FROM (%s) TO (%s)',
            [lo, hi],
        )
    return moved


def partitions_ensure(*, now: datetime, ahead: int) -> list[date]:
    """Today's partition and the next ``ahead`` days'; returns the days made now."""
    today = now.astimezone(UTC).date()
    have = set(partition_days())
    made = []
    for offset in range(ahead + 1):
        day = today + timedelta(days=offset)
        if day not in have:
            partition_create(day)
            made.append(day)
    return made


def partitions_drop_before(cutoff: datetime, *, batch: int = 10_000) -> tuple[list[date], int]:
    """Drop each day's partition that ends at or before ``cutoff``, and delete older rows
    from the default partition in short batches. Returns (days dropped, rows deleted)."""
    dropped = []
    for day in partition_days():
        lo, hi = _bounds(day)
        if datetime.fromisoformat(hi) > cutoff:
            break
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [TABLE])
            # Rows written earlier in this transaction have their deferred foreign-key
            # checks pending, and a table with pending checks cannot be dropped: run them.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            # The drop locks the whole table for a moment: never queue every write behind
            # a long reader for more than 5 s (the next hourly run tries again).
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            cursor.execute(f'DROP TABLE IF EXISTS "{partition_name(day)}"')
        dropped.append(day)
    deleted = 0
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                f'DELETE FROM "{DEFAULT}" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "{DEFAULT}" '  # noqa: S608 - our own names
                "WHERE minute < %s LIMIT %s))",
                [cutoff, batch],
            )
            deleted += cursor.rowcount
            if cursor.rowcount < batch:
                return dropped, deleted
