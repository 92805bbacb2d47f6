"""Paying in: redeem a voucher, start a top-up, list payments."""

from __future__ import annotations

import argparse

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand
from gpurental.client.cli.exit_codes import OK
from gpurental.client.cli.output import money, print_json, say, table


def cmd_redeem(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        data = client.redeem_voucher(args.code)
    if args.json:
        print_json(data)
        return OK
    cur = data.get("currency") or ""
    if data.get("created"):
        say(
            f"voucher {data.get('code')} redeemed: {money(data.get('amount'), cur)} of credit "
            f"until {data.get('credit_expires_at')}; balance {money(data.get('balance'), cur)}"
        )
    else:
        say(f"voucher {data.get('code')} was redeemed before; nothing added")
    return OK


def cmd_topup(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        data = client.top_up(args.amount)
    if args.json:
        print_json(data)
        return OK
    say(f"pay {money(data.get('amount'), data.get('currency') or '')} at:")
    say(data.get("checkout_url", ""))
    return OK


def cmd_payments(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        payments = client.payments()
    if args.json:
        print_json(payments)
        return OK
    table(
        ["RECEIPT", "STARTED", "AMOUNT", "STATUS", "PAID"],
        [
            [
                p.get("receipt_number"),
                str(p.get("created_at", ""))[:16],
                money(p.get("amount"), p.get("currency") or ""),
                p.get("status"),
                str(p.get("paid_at") or "")[:16],
            ]
            for p in payments
        ],
    )
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("redeem", cmd_redeem, "redeem a voucher code for credit")
    p.add_argument("code")
    p = command("topup", cmd_topup, "start a card top-up; prints the checkout URL to pay at")
    p.add_argument("amount", help="how much credit to buy, e.g. 20.00")
    command("payments", cmd_payments, "list your top-ups and their status")
