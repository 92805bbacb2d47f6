"""Billing: usage per instance per day, invoices, an invoice as PDF or CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, month_arg
from gpurental.client.cli.exit_codes import OK
from gpurental.client.cli.output import money, print_json, say, table


def cmd_usage(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if args.csv:
            sys.stdout.flush()
            sys.stdout.buffer.write(client.usage_csv(args.month))
            sys.stdout.buffer.flush()
            return OK
        data = client.usage(args.month)
    if args.json:
        print_json(data)
        return OK
    cur = data.get("currency") or ""
    totals = data.get("totals") or {}
    rows = [
        [r["day"], r["instance_name"], r["plan"], r["gpu_hours"], r["cost"]]
        for r in data.get("rows") or []
    ]
    rows.append(["total", None, None, totals.get("gpu_hours"), totals.get("cost")])
    say(f"Usage in {data.get('month')} ({cur}):")
    table(["DAY", "INSTANCE", "PLAN", "GPU-HOURS", "COST"], rows)
    return OK


def cmd_invoices(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        invoices = client.invoices()
    if args.json:
        print_json(invoices)
        return OK
    table(
        ["ID", "NUMBER", "KIND", "PERIOD", "STATUS", "TOTAL"],
        [
            [
                i.get("id"),
                i.get("number"),
                i.get("kind"),
                str(i.get("period_start", ""))[:7],
                i.get("status"),
                money(i.get("total"), i.get("currency") or ""),
            ]
            for i in invoices
        ],
    )
    return OK


def cmd_invoice(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if args.pdf or args.csv:
            target, content = (
                (args.pdf, client.invoice_pdf(args.id))
                if args.pdf
                else (args.csv, client.invoice_csv(args.id))
            )
        else:
            invoice = client.get_invoice(args.id)
            target = content = None
    if target is not None:
        if target == "-":
            sys.stdout.flush()
            sys.stdout.buffer.write(content)
            sys.stdout.buffer.flush()
            return OK
        Path(target).write_bytes(content)
        if args.json:
            print_json({"id": args.id, "file": target, "bytes": len(content)})
        else:
            say(f"saved invoice {args.id} to {target} ({len(content)} bytes)")
        return OK
    if args.json:
        print_json(invoice)
        return OK
    cur = invoice.get("currency") or ""
    say(
        f"{invoice.get('number')} ({invoice.get('kind')}, {invoice.get('status')}): "
        f"{invoice.get('period_start')} to {invoice.get('period_end')}, "
        f"total {money(invoice.get('total'), cur)}"
    )
    table(
        ["DESCRIPTION", "RATE", "GPU-HOURS", "AMOUNT"],
        [
            [
                line.get("description"),
                line.get("rate_kind"),
                line.get("gpu_hours"),
                line.get("amount"),
            ]
            for line in invoice.get("lines") or []
        ],
    )
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("usage", cmd_usage, "GPU-hours and cost per instance per day, for a month")
    p.add_argument("--month", type=month_arg, metavar="YYYY-MM", help="default: this month")
    p.add_argument("--csv", action="store_true", help="the CSV report on stdout")

    command("invoices", cmd_invoices, "list your invoices")

    p = command("invoice", cmd_invoice, "show an invoice, or save it as PDF or CSV")
    p.add_argument("id")
    document = p.add_mutually_exclusive_group()
    document.add_argument("--pdf", metavar="FILE", help="save the PDF here (- for stdout)")
    document.add_argument("--csv", metavar="FILE", help="save the CSV here (- for stdout)")
