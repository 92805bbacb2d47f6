"""Argument types: what the user typed, checked before any request is made (exit 2)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal, InvalidOperation

Handler = Callable[[argparse.Namespace], int]
# Registers a subcommand (name, handler, help) and returns its parser for the arguments.
AddCommand = Callable[[str, Handler, str], argparse.ArgumentParser]


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


def idle_minutes(value: str) -> int:
    if value.strip().lower() in ("off", "never", "0"):
        return 0
    try:
        minutes = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of minutes or 'off'") from None
    if minutes < 0:
        raise argparse.ArgumentTypeError("must be 0 ('off') or more")
    return minutes


def time_arg(value: str) -> datetime:
    """An ISO 8601 time from the command line; without an offset, the local time zone."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO 8601 time, e.g. 2026-12-03T10:00Z or 2026-12-03T10:00"
        ) from None
    try:
        return moment if moment.tzinfo is not None else moment.astimezone()
    except (OverflowError, ValueError):
        raise argparse.ArgumentTypeError(f"{value!r} is out of range") from None


def hours_arg(value: str) -> Decimal:
    try:
        hours = Decimal(value)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of hours") from None
    if not hours.is_finite() or hours <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    if hours > 24 * 366:
        raise argparse.ArgumentTypeError("at most a year of hours")
    if (hours * 60) % 1:
        raise argparse.ArgumentTypeError("must be whole minutes (e.g. 1.5 or 0.25)")
    return hours


def month_arg(value: str) -> str:
    if not re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a month: use YYYY-MM, e.g. 2026-10")
    return value


def subcommands(parser: argparse.ArgumentParser, dest: str, metavar: str) -> AddCommand:
    """Subcommands under ``parser`` (``gpurental webhooks add …``): the returned function
    registers one (name, handler, help), with its own ``--json`` that leaves a
    ``gpurental --json webhooks add …`` alone, and returns its parser."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar)

    def add(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="JSON on stdout"
        )
        p.set_defaults(handler=handler)
        return p

    return add
