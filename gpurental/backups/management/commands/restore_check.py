"""Restore the newest backup (or the one named) into a scratch database and compare ledger
totals, invoice numbers and every table's row count with what was backed up."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from gpurental.backups.services import BackupError, restore_check


class Command(BaseCommand):
    help = "Prove the newest backup restores: restore it aside, compare, drop it."

    def add_arguments(self, parser):
        parser.add_argument("backup", nargs="?", help="a .dump file (default: the newest)")

    def handle(self, *args, backup: str | None = None, **options):
        try:
            result = restore_check(Path(backup) if backup else None)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        tables = len(result.summary["counts"])
        rows = sum(result.summary["counts"].values())
        self.stdout.write(
            f"{result.backup.name}: restored in {result.restore_s:.2f} s; {tables} tables, "
            f"{rows} rows, ledger total {result.summary['ledger_total']}, "
            f"{result.summary['invoices_numbered']} numbered invoices"
        )
        if not result.ok:
            raise CommandError(
                "the restore differs from the backup:\n  " + "\n  ".join(result.differences)
            )
        self.stdout.write("same as backed up: counts, ledger and charge totals, invoice numbers")
