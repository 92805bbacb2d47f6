"""Reservations: availability ahead, quote and book, list, cancel with a refund, relaunch."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, hours_arg, positive_int, time_arg
from gpurental.client.cli.exit_codes import OK, UNEXPECTED, UsageError
from gpurental.client.cli.output import (
    confirm,
    instance_line,
    money,
    print_json,
    say,
    table,
    warn,
    when,
)
from gpurental.client.errors import InvalidState
from gpurental.client.models import Reservation


def _percent(fraction: Any) -> str:
    try:
        return f"{(Decimal(str(fraction)) * 100).normalize():f} %"
    except InvalidOperation:
        return str(fraction)


def _reservation_line(r: Reservation) -> str:
    line = (
        f"reservation {r.id}: {r.status}, {r.gpu_count}x {r.gpu_model} "
        f"from {when(r.start)} to {when(r.end)}"
    )
    if r.host:
        line += f" on {r.host} (GPUs {', '.join(map(str, r.gpu_indices))})"
    line += f"; paid {money(r.price, r.currency)}"
    if r.refunded:
        line += f", refunded {money(r.refunded, r.currency)}"
    if r.instance_id:
        line += f"; instance {r.instance_id}"
    return line


def _quote_text(quote: dict[str, Any]) -> str:
    cur = quote.get("currency") or ""
    late = quote.get("late_refund_percent")
    until = quote.get("full_refund_until")
    try:
        full_refund_gone = datetime.fromisoformat(until) <= datetime.now(UTC)
    except (TypeError, ValueError):
        full_refund_gone = False
    if full_refund_gone:
        policy = f"It starts soon: cancelling before the start refunds {late} %."
    else:
        policy = (
            f"Cancel before {when(until)} for a full refund; later, before the start, "
            f"{late} % is refunded."
        )
    return (
        f"{quote.get('gpu_count')}x {quote.get('gpu_model')} ({quote.get('plan')}) "
        f"from {when(quote.get('start'))} to {when(quote.get('end'))}: "
        f"{quote.get('hours')} h, {quote.get('gpu_hours')} GPU-hours at the reserved rate "
        f"{quote.get('hourly_rate')} {cur}/h ({_percent(quote.get('discount'))} off).\n"
        f"Price: {money(quote.get('price'), cur)}, paid now. {policy}"
    )


def cmd_reserve(args: argparse.Namespace) -> int:
    if args.end is not None and args.end <= args.start:
        raise UsageError("--end must be after --start")
    end = args.end or args.start + timedelta(minutes=int(args.hours * 60))
    choice = {"gpu_model": args.model, "gpu_count": args.count}
    with logged_in_client() as client:
        quote = client.quote(start=args.start, end=end, **choice)
        if not args.json:
            say(_quote_text(quote))
        if not args.yes:
            price = money(quote.get("price"), quote.get("currency") or "")
            if not confirm(f"Book and pay {price}?", f"booking charges {price} now; pass --yes"):
                warn("not booked")
                return UNEXPECTED
        reservation = client.book(image=args.image, start=args.start, end=end, **choice)
    if args.json:
        print_json(reservation.raw)
    else:
        say(_reservation_line(reservation))
    return OK


def cmd_reservations(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        reservations = client.reservations()
    if args.json:
        print_json([r.raw for r in reservations])
        return OK
    table(
        ["ID", "STATUS", "GPUS", "START", "END", "PRICE", "REFUND NOW", "INSTANCE"],
        [
            [
                r.id,
                r.status,
                f"{r.gpu_count}x {r.gpu_model}",
                when(r.start),
                when(r.end),
                money(r.price, r.currency),
                r.refund_if_cancelled_now,
                r.instance_id,
            ]
            for r in reservations
        ],
    )
    return OK


def cmd_cancel_reservation(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if not args.yes:
            r = client.get_reservation(args.id)
            if r.refund_if_cancelled_now is None:
                raise InvalidState(
                    f"reservation {r.id} is {r.status}: only a booked reservation can be "
                    "cancelled, before its start",
                    code="invalid_state",
                )
            refund = money(r.refund_if_cancelled_now, r.currency)
            question = (
                f"Cancel reservation {r.id} ({r.gpu_count}x {r.gpu_model} from "
                f"{when(r.start)})? You get {refund} of {money(r.price, r.currency)} back."
            )
            if not confirm(question, f"cancelling refunds {refund} now; pass --yes"):
                warn("not cancelled")
                return UNEXPECTED
        reservation = client.cancel_reservation(args.id)
    if args.json:
        print_json(reservation.raw)
    else:
        say(_reservation_line(reservation))
    return OK


def cmd_relaunch(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instance = client.relaunch_reservation(args.id)
    if args.json:
        print_json(instance.raw)
    else:
        say(instance_line(instance))
    return OK


def _per_day(hours: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """(local day, fewest free, most free, the largest booking that fits all day)."""
    days: dict[str, list[dict[str, Any]]] = {}
    for slot in hours:
        day = (when(slot.get("start")) or "?")[:10]
        days.setdefault(day, []).append(slot)
    return [
        (
            day,
            min(s["free"] for s in slots),
            max(s["free"] for s in slots),
            min(s["largest_block"] for s in slots),
        )
        for day, slots in days.items()
    ]


def cmd_availability(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        data = client.availability(gpu_model=args.model, hours=args.hours)
    if args.json:
        print_json(data)
        return OK
    models = data.get("models") or []
    hourly = args.hourly or (data.get("hours") or 0) <= 48
    rows = []
    for model in models:
        name = model.get("short_name") or model.get("gpu_model")
        if hourly:
            rows += [
                [name, when(s.get("start")), f"{s['free']}/{model['total']}", s["largest_block"]]
                for s in model.get("hours") or []
            ]
        else:
            rows += [
                [name, day, f"{low}-{high}/{model['total']}", block]
                for day, low, high, block in _per_day(model.get("hours") or [])
            ]
    table(["GPU", "HOUR" if hourly else "DAY", "FREE", "ONE HOST"], rows)
    if not hourly:
        say("ONE HOST: the most GPUs free on one host all day (the largest booking that fits).")
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("reserve", cmd_reserve, "book GPUs ahead at the reserved rate (shows the price)")
    p.add_argument("model", metavar="MODEL", help="GPU model short name or slug (A100)")
    p.add_argument("count", metavar="COUNT", type=positive_int, help="how many GPUs")
    p.add_argument("--start", required=True, type=time_arg, metavar="TIME", help="ISO 8601")
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--hours", type=hours_arg, metavar="H", help="how long")
    length.add_argument("--end", type=time_arg, metavar="TIME", help="ISO 8601, exclusive")
    p.add_argument("--image", required=True, metavar="SLUG", help="what runs from the start")
    p.add_argument("--yes", action="store_true", help="book without asking (it is paid now)")

    command("reservations", cmd_reservations, "list your reservations")

    p = command(
        "cancel-reservation", cmd_cancel_reservation, "cancel a reservation (shows the refund)"
    )
    p.add_argument("id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = command(
        "relaunch",
        cmd_relaunch,
        "a new instance on an active reservation's GPUs after its instance was terminated",
    )
    p.add_argument("id", metavar="RESERVATION_ID")

    p = command("availability", cmd_availability, "free GPUs ahead, per day or per hour")
    p.add_argument("model", metavar="MODEL", nargs="?", help="one GPU model (default: all)")
    p.add_argument("--hours", type=positive_int, help="how far ahead (default: the horizon)")
    p.add_argument("--hourly", action="store_true", help="one row per hour (default up to 48 h)")
