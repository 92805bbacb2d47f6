"""Take a backup of the database now (what beat does every BACKUP_INTERVAL_S)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from gpurental.backups.services import BackupError, backup_create


class Command(BaseCommand):
    help = "Dump the database with pg_dump, and the summary restore_check compares with."

    def add_arguments(self, parser):
        parser.add_argument("--dir", help="where (default BACKUP_DIR)")

    def handle(self, *args, dir: str | None = None, **options):
        try:
            dump = backup_create(directory=Path(dir) if dir else None)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(str(dump))
