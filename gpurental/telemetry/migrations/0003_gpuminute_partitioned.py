"""GpuMinute becomes a table partitioned by day (see gpurental/telemetry/partitions.py).

The rows already there are copied over: into the default partition first, then into
each recent day's own partition. Indexes and constraints are recreated under their own
names from the old table's definitions, so Django's view of the table is unchanged. A
partitioned table's primary key must hold the partition key: it is (id, minute), and id
still comes from one sequence. Reversible: the other way makes a plain table again.
"""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import migrations

TABLE = "telemetry_gpuminute"
OLD = f"{TABLE}_before_rebuild"


def _definitions(cursor):
    """The old table's unique and foreign-key constraints, and its other indexes."""
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype IN ('u', 'f') ORDER BY conname",
        [TABLE],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
        "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass) ORDER BY indexname",
        [TABLE, TABLE],
    )
    indexes = [row[0] for row in cursor.fetchall()]
    return constraints, indexes


def _rebuild(schema_editor, *, partitioned: bool):
    with schema_editor.connection.cursor() as cursor:
        constraints, indexes = _definitions(cursor)
        cursor.execute(f'ALTER TABLE "{TABLE}" RENAME TO "{OLD}"')
        tail = " PARTITION BY RANGE (minute)" if partitioned else ""
        cursor.execute(
            f'CREATE TABLE "{TABLE}" (LIKE "{OLD}" INCLUDING CONSTRAINTS){tail}'
        )
        if partitioned:
            cursor.execute(f'CREATE TABLE "{TABLE}_default" PARTITION OF "{TABLE}" DEFAULT')
        cursor.execute(f'INSERT INTO "{TABLE}" SELECT * FROM "{OLD}"')  # noqa: S608
        cursor.execute(f'DROP TABLE "{OLD}"')  # its sequence, indexes and constraints too
        cursor.execute(f'CREATE SEQUENCE "{TABLE}_id_seq" OWNED BY "{TABLE}".id')
        cursor.execute(
            f"SELECT setval('\"{TABLE}_id_seq\"', COALESCE((SELECT max(id) FROM \"{TABLE}\"), 0) + 1, false)"  # noqa: S608
        )
        cursor.execute(
            f"ALTER TABLE \"{TABLE}\" ALTER COLUMN id SET DEFAULT nextval('\"{TABLE}_id_seq\"')"
        )
        key = "(id, minute)" if partitioned else "(id)"
        cursor.execute(f'ALTER TABLE "{TABLE}" ADD CONSTRAINT "{TABLE}_pkey" PRIMARY KEY {key}')
        for name, definition in constraints:
            cursor.execute(f'ALTER TABLE "{TABLE}" ADD CONSTRAINT "{name}" {definition}')
        for definition in indexes:
            cursor.execute(definition)


def forwards(apps, schema_editor):
    from gpurental.telemetry.partitions import partition_create

    _rebuild(schema_editor, partitioned=True)
    # Each recent day's rows (and the next days) get their own partition at once.
    now = datetime.now(UTC)
    oldest = (now - timedelta(days=settings.TELEMETRY_RETENTION_DAYS)).date()
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT (minute AT TIME ZONE 'UTC')::date FROM \"{TABLE}\" WHERE minute >= %s",  # noqa: S608
            [oldest],
        )
        days = {day for (day,) in cursor.fetchall()}
    today = now.date()
    days |= {today + timedelta(days=n) for n in range(settings.TELEMETRY_PARTITIONS_AHEAD + 1)}
    for day in sorted(days):
        partition_create(day)


def backwards(apps, schema_editor):
    _rebuild(schema_editor, partitioned=False)


class Migration(migrations.Migration):
    atomic = True

    dependencies = [("telemetry", "0002_gpuhour")]

    operations = [migrations.RunPython(forwards, backwards)]
