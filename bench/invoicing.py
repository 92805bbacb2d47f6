"""Monthly invoice run: a month of charges for many customers, then drafts and numbers.

    .venv/bin/python bench/invoicing.py [--customers 5000] [--charges 200]

Starts its own embedded PostgreSQL in a temp dir (never touches real data), loads
``customers × charges`` charge rows for October 2026 (Europe/Berlin) with COPY, two
instances per customer, then times:

- drafts: ``invoices_generate`` for the month (one aggregate over the charges, invoices
  and lines written in batches of users), with the process's peak RSS;
- the same run again (drafts rebuilt in place), under tracemalloc for the Python heap peak;
- issuing every draft with ``invoice_issue`` (one transaction each, gap-free numbers).

Checks that the invoices add up to the charges (to the cent per line) and that the
numbers run 1…N without a gap. Goal: drafts for 5,000 customers (a million charges)
in under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import setup_django  # noqa: E402

ZONE = "Europe/Berlin"
MONTH_START = datetime(2026, 10, 1, tzinfo=ZoneInfo(ZONE)).astimezone(UTC)
MONTH_HOURS = 31 * 24


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def load(customers: int, per_customer: int) -> tuple[int, Decimal]:
    """Customers, their instances and a month of charges; returns (rows, sum of amounts)."""
    from django.db import connection

    from gpurental.accounts.models import User
    from gpurental.catalog.models import GPUModel, ImageTemplate, Interconnect, Plan
    from gpurental.rentals.models import Instance, InstanceStatus

    model = GPUModel.objects.create(
        slug="a100",
        name="A100 80GB",
        short_name="A100",
        memory_gb=80,
        fp16_tflops=312,
        bf16_tflops=312,
        fp32_tflops=19.5,
        memory_bandwidth_gbs=2039,
        interconnect=Interconnect.NVSWITCH,
    )
    plans = [
        Plan.objects.create(
            slug=f"a100-x{n}",
            name=f"{n}× A100",
            gpu_model=model,
            gpu_count=n,
            vcpus=8 * n,
            memory_gb=64 * n,
            disk_gb=200,
            hourly_rate=Decimal("2.2000") * n,
        )
        for n in (1, 2, 4, 8)
    ]
    image = ImageTemplate.objects.create(slug="jupyter", name="JupyterLab", image="x")
    users = User.objects.bulk_create(
        User(email=f"customer{n}@example.com", password="!", full_name=f"Customer {n}")  # noqa: S106
        for n in range(customers)
    )
    rng = random.Random(42)
    instances = Instance.objects.bulk_create(
        (
            Instance(
                user=user,
                name=f"job-{user.pk}-{k}",
                plan=(plan := rng.choice(plans)),
                gpu_model=model,
                gpu_count=plan.gpu_count,
                image=image,
                status=InstanceStatus.STOPPED,
            )
            for user in users
            for k in range(2)
        ),
        batch_size=5000,
    )
    off_peak = set(range(8))  # the plans' default window, 00:00–08:00 local
    zone = ZoneInfo(ZONE)
    rows = 0
    total = Decimal(0)
    per_instance = per_customer // 2
    started = time.perf_counter()
    with connection.cursor() as cursor:
        columns = (
            "instance_id, user_id, period_start, period_end, rate_kind, gpu_count, "
            "hourly_rate, amount, created_at"
        )
        with cursor.copy(
            f"COPY billing_charge ({columns}) FROM STDIN"  # noqa: S608 - constant columns
        ) as copy:
            buffer = io.StringIO()
            for instance in instances:
                rate = instance.plan.hourly_rate
                # Hour-long charges (a meter that ran hourly), in runs of a few hours.
                at = MONTH_START + timedelta(hours=rng.randrange(0, MONTH_HOURS - per_instance * 2))
                for _ in range(per_instance):
                    end = at + timedelta(hours=1)
                    kind = "off_peak" if at.astimezone(zone).hour in off_peak else "peak"
                    hourly = rate * Decimal("0.7") if kind == "off_peak" else rate
                    amount = hourly.quantize(Decimal("0.000001"))
                    buffer.write(
                        f"{instance.pk}\t{instance.user_id}\t{at.isoformat()}\t{end.isoformat()}\t"
                        f"{kind}\t{instance.gpu_count}\t{hourly}\t{amount}\t{end.isoformat()}\n"
                    )
                    total += amount
                    rows += 1
                    at = end + (
                        timedelta(hours=rng.randrange(1, 3)) if rng.random() < 0.1 else timedelta()
                    )
                if buffer.tell() > 8 << 20:
                    copy.write(buffer.getvalue())
                    buffer = io.StringIO()
            copy.write(buffer.getvalue())
        cursor.execute("ANALYZE billing_charge")
    print(f"  loaded {rows:,} charges in {time.perf_counter() - started:.1f} s", flush=True)
    return rows, total


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=5000)
    parser.add_argument("--charges", type=int, default=200, help="per customer")
    parser.add_argument(
        "--smoke", action="store_true", help="a small size for CI: checks it runs and is sane"
    )
    args = parser.parse_args()
    if args.smoke:  # the checks below (every invoice, totals, numbering) still run
        args.customers, args.charges = 50, 10
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    try:
        setup_django(work / "var", TIME_ZONE=ZONE)
        print(
            f"invoice benchmark: {args.customers:,} customers × {args.charges} charges, "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        rows, charged = load(args.customers, args.charges)

        from django.db.models import Count, Sum

        from gpurental.billing.models import Invoice, InvoiceLine, InvoiceStatus
        from gpurental.billing.services.invoicing import invoice_issue, invoices_generate

        rss_before = max_rss_mb()
        started = time.perf_counter()
        drafts = invoices_generate(year=2026, month=10)
        draft_s = time.perf_counter() - started
        rss_after = max_rss_mb()

        tracemalloc.start()
        started = time.perf_counter()
        invoices_generate(year=2026, month=10)
        rerun_s = time.perf_counter() - started
        _, heap_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        invoices = list(Invoice.objects.filter(status=InvoiceStatus.DRAFT).order_by("pk"))
        started = time.perf_counter()
        for invoice in invoices:
            invoice_issue(invoice=invoice)
        issue_s = time.perf_counter() - started

        lines = InvoiceLine.objects.aggregate(n=Count("id"), total=Sum("amount"))
        invoiced = Invoice.objects.aggregate(total=Sum("total"))["total"]
        numbers = sorted(
            int(n.rsplit("-", 1)[1]) for n in Invoice.objects.values_list("number", flat=True)
        )
        assert drafts == args.customers, drafts
        assert invoiced == lines["total"]
        assert abs(invoiced - charged) <= Decimal("0.005") * lines["n"], (invoiced, charged)
        assert numbers == list(range(1, len(numbers) + 1)), "numbers have a gap"
    finally:
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"  charges                 {rows:>12,}")
    print(f"  invoices / lines        {drafts:>12,} / {lines['n']:,}")
    print(f"  charged / invoiced      {charged:>12,.2f} / {invoiced:,.2f}")
    print(f"  drafts                  {draft_s:>11.2f} s   (goal: under 60 s)")
    print(f"  drafts rebuilt          {rerun_s:>11.2f} s   (under tracemalloc)")
    print(
        f"  issue all, one by one   {issue_s:>11.2f} s   ({issue_s / len(invoices) * 1000:.1f} ms each)"
    )
    print(f"  peak RSS                {rss_after:>10.0f} MB  (before the run: {rss_before:.0f} MB)")
    print(f"  Python heap peak        {heap_peak / 2**20:>10.1f} MB  (tracemalloc, drafts rebuilt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
