"""Paying in: redeem a voucher, start a top-up, list payments, automatic top-up."""

from __future__ import annotations

import argparse

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, subcommands
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


def _say_auto_topup(data: dict) -> None:
    cur = data.get("currency") or ""
    card = data.get("card") or "none saved (gpurental autotopup card)"
    if data.get("enabled"):
        say(
            f"automatic top-up: on: below {money(data.get('threshold'), cur)}, "
            f"{money(data.get('amount'), cur)} at a time, "
            f"at most {money(data.get('monthly_cap'), cur)} a month"
        )
    else:
        say("automatic top-up: off")
    say(f"card: {card}")
    say(f"taken this month: {money(data.get('month_charged'), cur)}")


def cmd_autotopup_show(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        data = client.auto_topup()
    if args.json:
        print_json(data)
    else:
        _say_auto_topup(data)
    return OK


def cmd_autotopup_set(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        now = client.auto_topup()
        data = client.set_auto_topup(
            enabled=not args.off,
            threshold=args.threshold if args.threshold is not None else now["threshold"],
            amount=args.amount if args.amount is not None else now["amount"],
            monthly_cap=args.cap if args.cap is not None else now["monthly_cap"],
        )
    if args.json:
        print_json(data)
    else:
        _say_auto_topup(data)
    return OK


def cmd_autotopup_card(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if args.remove:
            client.remove_card()
            data = {"removed": True}
        else:
            data = {"setup_url": client.save_card()}
    if args.json:
        print_json(data)
    elif args.remove:
        say("card removed; automatic top-up is off")
    else:
        say("save the card for automatic top-ups at:")
        say(data["setup_url"])
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("redeem", cmd_redeem, "redeem a voucher code for credit")
    p.add_argument("code")
    p = command("topup", cmd_topup, "start a card top-up; prints the checkout URL to pay at")
    p.add_argument("amount", help="how much credit to buy, e.g. 20.00")
    command("payments", cmd_payments, "list your top-ups and their status")
    auto = command(
        "autotopup",
        cmd_autotopup_show,
        "automatic top-up: show, set [--threshold --amount --cap], off, card [--remove]",
    )
    sub = subcommands(auto, "autotopup_command", "show|set|off|card")
    sub("show", cmd_autotopup_show, "the settings and this month's total")
    turn_on = sub("set", cmd_autotopup_set, "turn it on (unnamed values stay as they are)")
    turn_on.add_argument("--threshold", help="top up when the balance is below this")
    turn_on.add_argument("--amount", help="charged each time")
    turn_on.add_argument("--cap", help="at most this much in a calendar month")
    turn_on.set_defaults(off=False)
    sub("off", cmd_autotopup_set, "turn it off (the card stays saved)").set_defaults(
        off=True, threshold=None, amount=None, cap=None
    )
    card = sub("card", cmd_autotopup_card, "print the page to save a card at; --remove forgets it")
    card.add_argument("--remove", action="store_true", help="forget the saved card")
