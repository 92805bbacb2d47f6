"""Backup and restore of the platform's database, timed: the recovery point and the
recovery time as measured.

Starts its own embedded PostgreSQL in a temp dir (never touches real data), loads
customers with a month of charges (bench/invoicing.py's loader), issues their invoices,
then times ``backup_create`` (pg_dump, custom format, with the summary in the same
snapshot) and ``restore_check`` (pg_restore into a scratch database, the summary
compared, the scratch dropped), and checks the restore matched.

    python bench/backup.py [--customers 5000 --charges 200] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import setup_django  # noqa: E402
from bench.invoicing import ZONE, load  # noqa: E402

MB = 1000**2


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=5000)
    parser.add_argument("--charges", type=int, default=200, help="per customer")
    parser.add_argument("--smoke", action="store_true", help="a small size for CI")
    args = parser.parse_args()
    if args.smoke:
        args.customers, args.charges = 50, 10
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-backup-"))
    from gpurental import embedded

    try:
        setup_django(work / "var", TIME_ZONE=ZONE, BACKUP_DIR=str(work / "backups"))
        print(f"backup benchmark: {args.customers:,} customers × {args.charges} charges")
        rows, _ = load(args.customers, args.charges)
        from django.db import connection

        from gpurental.backups.services import backup_create, restore_check
        from gpurental.billing.models import Invoice, InvoiceStatus
        from gpurental.billing.services.invoicing import invoice_issue, invoices_generate

        invoices_generate(year=2026, month=10)
        for invoice in Invoice.objects.filter(status=InvoiceStatus.DRAFT).order_by("pk"):
            invoice_issue(invoice=invoice)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            db_bytes = cursor.fetchone()[0]
        connection.close()

        started = time.perf_counter()
        dump = backup_create()
        backup_s = time.perf_counter() - started
        dump_bytes = dump.stat().st_size
        started = time.perf_counter()
        result = restore_check(dump)
        check_s = time.perf_counter() - started
        assert result.ok, result.differences
        assert result.summary["counts"]["billing_charge"] == rows
        assert result.summary["invoices_numbered"] == args.customers
    finally:
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"  charges / invoices      {rows:>12,} / {args.customers:,}")
    print(f"  database                {db_bytes / MB:>11.1f} MB")
    print(f"  backup (pg_dump -Fc)    {backup_s:>11.2f} s   ({dump_bytes / MB:.1f} MB dump)")
    print(f"  restore (pg_restore)    {result.restore_s:>11.2f} s   (the recovery time)")
    print(f"  restore_check, whole    {check_s:>11.2f} s   (restore, compare, drop)")
    print("  restored: same counts, ledger and charge totals, invoice numbers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
