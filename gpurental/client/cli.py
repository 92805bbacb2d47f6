"""The ``gpurental`` command line: rent GPU containers from a terminal or a script.

    gpurental login [--api-key KEY] [--url URL]
    gpurental gpus
    gpurental launch (--gpu MODEL [--count N] | --plan SLUG) --image SLUG
                     [--name NAME] [--model-repo huggingface] [--idle-stop MINUTES]
                     [--wait | --no-wait]
    gpurental ls [--status STATUS]
    gpurental open ID [--print]
    gpurental stop ID | start ID | restart ID
    gpurental terminate ID [--yes]
    gpurental idle-stop ID MINUTES|off
    gpurental reserve MODEL COUNT --start TIME (--hours H | --end TIME) --image SLUG [--yes]
    gpurental reservations
    gpurental cancel-reservation ID [--yes]
    gpurental relaunch RESERVATION_ID
    gpurental availability [MODEL] [--hours N] [--hourly]
    gpurental usage [--month YYYY-MM] [--csv]
    gpurental invoices
    gpurental invoice ID [--pdf FILE | --csv FILE]

Times are ISO 8601 (2026-12-03T10:00Z); without an offset, they are your local time.
Every command takes --json: machine-readable JSON on stdout and nothing else there.
Errors go to stderr as "gpurental: <message>". GPURENTAL_API_KEY and GPURENTAL_URL
override what `gpurental login` saved (GPURENTAL_CONFIG names the file).

Exit codes (scripts can rely on them):
  0  ok
  1  unexpected error
  2  usage error (bad arguments, or input the server rejected)
  3  authentication failed, permission denied, or no API key configured
  4  not found
  5  no capacity or quota exceeded
  6  invalid state (the instance's or reservation's status does not allow it)
  7  launch failed (the instance ended failed or lost)
  8  timeout
  9  server unreachable
"""

from __future__ import annotations

import argparse
import getpass
import itertools
import json
import os
import re
import sys
import threading
import time
import traceback
import webbrowser
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

from gpurental import __version__
from gpurental.client import config
from gpurental.client.client import Client
from gpurental.client.errors import (
    AuthenticationError,
    ConnectionError,
    GpuRentalError,
    InvalidState,
    LaunchFailed,
    NoCapacity,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    Timeout,
    ValidationError,
)
from gpurental.client.models import STATUSES, Instance, Reservation

OK = 0
UNEXPECTED = 1
USAGE = 2
AUTH = 3
NOT_FOUND = 4
NO_CAPACITY = 5
INVALID_STATE = 6
LAUNCH_FAILED = 7
TIMEOUT = 8
UNREACHABLE = 9
INTERRUPTED = 130

# First match wins, so subclasses come before their bases.
EXIT_CODES: list[tuple[type[GpuRentalError] | tuple[type[GpuRentalError], ...], int]] = [
    (ConnectionError, UNREACHABLE),
    (Timeout, TIMEOUT),
    (LaunchFailed, LAUNCH_FAILED),
    (InvalidState, INVALID_STATE),
    ((NoCapacity, QuotaExceeded), NO_CAPACITY),
    (NotFound, NOT_FOUND),
    ((AuthenticationError, PermissionDenied, config.ConfigError), AUTH),
    (ValidationError, USAGE),
]

EXIT_CODES_HELP = "Exit codes" + (__doc__ or "").split("Exit codes", 1)[1]


def exit_code_for(error: GpuRentalError) -> int:
    for kinds, code in EXIT_CODES:
        if isinstance(error, kinds):
            return code
    return UNEXPECTED


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"gpurental: {message}\n")


class _UsageError(Exception):
    """Arguments argparse accepts but that do not go together."""


# Output


def _say(text: str = "") -> None:
    print(text, file=sys.stdout)


def _warn(text: str) -> None:
    print(f"gpurental: {text}", file=sys.stderr)


def _json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        _say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _instance_line(instance: Instance) -> str:
    line = f"instance {instance.id} ({instance.name or 'unnamed'}): {instance.status}"
    if instance.status_reason:
        line += f" ({instance.status_reason})"
    return line


class _Progress:
    """Shows how a launch goes, on stderr: a spinner on a terminal, else one line a change."""

    FRAMES = "|/-\\"

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.text = "launching"
        self.started = time.monotonic()
        self._last_line = ""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, instance: Instance) -> None:
        step = instance.latest_step
        self.text = f"instance {instance.id}: {instance.status}" + (f" - {step}" if step else "")
        if not self.tty and self.text != self._last_line:
            self._last_line = self.text
            print(self.text, file=self.stream, flush=True)

    def _spin(self) -> None:
        for frame in itertools.cycle(self.FRAMES):
            elapsed = time.monotonic() - self.started
            self.stream.write(f"\r\x1b[K{frame} {self.text} ({elapsed:.0f}s)")
            self.stream.flush()
            if self._done.wait(0.1):
                break

    def __enter__(self) -> _Progress:
        if self.tty:
            self._thread = threading.Thread(target=self._spin, name="gpurental-spinner")
            self._thread.daemon = True
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self.stream.write("\r\x1b[K")
            self.stream.flush()


# Commands


def _client() -> Client:
    # Key and URL: environment first, then what `gpurental login` saved.
    key, url = config.resolve()
    if not key:
        raise AuthenticationError("not logged in: run `gpurental login` or set GPURENTAL_API_KEY")
    return Client(api_key=key, base_url=url)


def cmd_login(args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    try:
        saved = config.load_config()
    except config.ConfigError:
        saved = {}  # logging in again is how a broken file gets fixed
    url = args.url or os.environ.get(config.ENV_URL)
    if not url:
        url = saved.get("url") or config.DEFAULT_URL
        if interactive:
            url = _ask(f"Server URL [{url}]: ") or url
    key = args.api_key or os.environ.get(config.ENV_API_KEY)
    if not key:
        # Reading the key from a prompt or stdin keeps it out of argv and shell history.
        if interactive:
            key = getpass.getpass("API key: ", stream=sys.stderr)
        else:
            key = sys.stdin.readline()
        key = key.strip()
    if not key:
        raise _UsageError("no API key given (--api-key, GPURENTAL_API_KEY, prompt or stdin)")
    with Client(api_key=key, base_url=url) as client:
        try:
            me = client.me()
        except AuthenticationError as exc:
            raise AuthenticationError(
                f"the server at {client.base_url} refused this API key: {exc.message}",
                status=exc.status,
                code=exc.code,
            ) from exc
        path = config.save_config({"url": client.base_url, "api_key": key})
    email = me.get("email", "")
    if args.json:
        _json({"url": client.base_url, "email": email, "config": str(path)})
    else:
        _say(f"Logged in to {client.base_url} as {email}; saved to {path}")
    return OK


def _ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline().strip()


def _model_keys(model: dict[str, Any]) -> set[str]:
    return {str(model[k]) for k in ("slug", "short_name", "name") if model.get(k)}


def _plan_model_key(plan: dict[str, Any]) -> str | None:
    value = plan.get("gpu_model")
    if isinstance(value, dict):
        value = value.get("slug") or value.get("short_name") or value.get("name")
    return str(value) if value else None


def _per_gpu_rate(plan: dict[str, Any]) -> Decimal | None:
    try:
        rate = Decimal(str(plan["hourly_rate"]))
        count = int(plan.get("gpu_count") or 1)
    except (KeyError, InvalidOperation, ValueError):
        return None
    # Shown with the places the server uses for rates; rounded once, here, for display.
    places = Decimal(1).scaleb(min(rate.as_tuple().exponent, -2))
    return (rate / count).quantize(places, rounding=ROUND_HALF_UP)


def cmd_gpus(args: argparse.Namespace) -> int:
    with _client() as client:
        models = client.gpu_models()
        plans = client.plans()
    rows = []
    for model in models:
        keys = _model_keys(model)
        priced = [
            (rate, plan.get("currency") or "")
            for plan in plans
            if _plan_model_key(plan) in keys and (rate := _per_gpu_rate(plan)) is not None
        ]
        rate, currency = min(priced, key=lambda p: p[0]) if priced else (None, "")
        rows.append(
            {
                **model,
                "price_per_gpu_hour": str(rate) if rate is not None else None,
                "price_currency": currency or None,
            }
        )
    if args.json:
        _json(rows)
        return OK
    _table(
        ["GPU", "NAME", "MEMORY", "INTERCONNECT", "FREE", "PRICE/GPU-HOUR"],
        [
            [
                row.get("short_name") or row.get("slug"),
                row.get("name"),
                f"{row['memory_gb']} GB" if row.get("memory_gb") is not None else None,
                row.get("interconnect") or None,
                f"{row.get('gpus_free', '?')}/{row.get('gpus_total', '?')}",
                f"from {row['price_per_gpu_hour']} {row['price_currency'] or ''}".rstrip()
                if row["price_per_gpu_hour"]
                else None,
            ]
            for row in rows
        ],
    )
    return OK


def cmd_launch(args: argparse.Namespace) -> int:
    if args.plan and args.count is not None:
        raise _UsageError("--count goes with --gpu; a plan fixes the GPU count")
    with _client() as client:
        instance = client.create_instance(
            gpu_type=args.gpu,
            framework=args.image,
            model_repo=args.model_repo,
            gpu_count=args.count or 1,
            plan=args.plan,
            name=args.name,
            idle_stop_minutes=args.idle_stop,
        )
        if not args.wait:
            if args.json:
                _json(instance.raw)
            else:
                _say(_instance_line(instance))
            return OK
        try:
            with _Progress(sys.stderr) as progress:
                url = instance.connect(timeout=args.timeout, on_progress=progress.update)
        except KeyboardInterrupt:
            _warn(f"stopped waiting; instance {instance.id} keeps launching (see `gpurental ls`)")
            return INTERRUPTED
        except Timeout as exc:
            raise Timeout(
                f"{exc.message}; it may still start: `gpurental ls`, "
                f"or `gpurental terminate {instance.id}`",
                instance=instance,
            ) from exc
    if args.json:
        _json(instance.raw)
    else:
        _say(url)
    return OK


def cmd_ls(args: argparse.Namespace) -> int:
    with _client() as client:
        instances = client.list_instances(status=args.status)
    if args.json:
        _json([i.raw for i in instances])
        return OK
    _table(
        ["ID", "NAME", "STATUS", "GPUS", "HOST", "CREATED"],
        [
            [
                i.id,
                i.name or None,
                i.status,
                f"{i.gpu_count}x {i.gpu_model}" if i.gpu_model else None,
                i.host,
                i.created_at.astimezone().strftime("%Y-%m-%d %H:%M") if i.created_at else None,
            ]
            for i in instances
        ],
    )
    return OK


def cmd_open(args: argparse.Namespace) -> int:
    with _client() as client:
        instance = client.get_instance(args.id)
    if instance.status != "running":
        hint = (
            f"; start it with `gpurental start {instance.id}`"
            if instance.status == "stopped"
            else ""
        )
        raise InvalidState(
            f"instance {instance.id} is {instance.status}, not running{hint}", code="invalid_state"
        )
    if not instance.jupyter_url:
        raise PermissionDenied(f"only the owner of instance {instance.id} sees its JupyterLab URL")
    if args.json:
        _json({"id": instance.id, "jupyter_url": instance.jupyter_url})
        return OK
    _say(instance.jupyter_url)
    if not args.print:
        webbrowser.open(instance.jupyter_url)
    return OK


def _action(name: str) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        with _client() as client:
            instance = getattr(client, name)(args.id)
        if args.json:
            _json(instance.raw)
        else:
            _say(_instance_line(instance))
        return OK

    command.__name__ = f"cmd_{name}"
    return command


def cmd_terminate(args: argparse.Namespace) -> int:
    with _client() as client:
        if not args.yes:
            if not sys.stdin.isatty():
                raise _UsageError("terminating deletes the instance's /workspace; pass --yes")
            instance = client.get_instance(args.id)
            answer = _ask(
                f"Terminate instance {instance.id} ({instance.name or 'unnamed'}, "
                f"{instance.status})? Its /workspace volume is deleted. [y/N] "
            )
            if answer.lower() not in ("y", "yes"):
                _warn("not terminated")
                return UNEXPECTED
        instance = client.terminate(args.id)
    if args.json:
        _json(instance.raw)
    else:
        _say(_instance_line(instance))
    return OK


def _idle_minutes(value: str) -> int:
    if value.strip().lower() in ("off", "never", "0"):
        return 0
    try:
        minutes = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of minutes or 'off'") from None
    if minutes < 0:
        raise argparse.ArgumentTypeError("must be 0 ('off') or more")
    return minutes


def cmd_idle_stop(args: argparse.Namespace) -> int:
    with _client() as client:
        instance = client.set_idle_policy(args.id, args.minutes)
    if args.json:
        _json(instance.raw)
        return OK
    policy = (
        f"stops after {instance.idle_stop_minutes} idle minutes (never deleted)"
        if instance.idle_stop_minutes
        else "idle auto-stop is off"
    )
    _say(f"{_instance_line(instance)}; {policy}")
    return OK


def _when(value: Any) -> str | None:
    """An API time, shown in the local time zone."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(value, datetime):
        return None
    return value.astimezone().strftime("%Y-%m-%d %H:%M %Z")


def _time_arg(value: str) -> datetime:
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


def _hours_arg(value: str) -> Decimal:
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


def _month_arg(value: str) -> str:
    if not re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a month: use YYYY-MM, e.g. 2026-10")
    return value


def _money(amount: Any, currency: str = "") -> str:
    return f"{amount} {currency}".strip() if amount is not None else "-"


def _percent(fraction: Any) -> str:
    try:
        return f"{(Decimal(str(fraction)) * 100).normalize():f} %"
    except InvalidOperation:
        return str(fraction)


def _reservation_line(r: Reservation) -> str:
    line = (
        f"reservation {r.id}: {r.status}, {r.gpu_count}x {r.gpu_model} "
        f"from {_when(r.start)} to {_when(r.end)}"
    )
    if r.host:
        line += f" on {r.host} (GPUs {', '.join(map(str, r.gpu_indices))})"
    line += f"; paid {_money(r.price, r.currency)}"
    if r.refunded:
        line += f", refunded {_money(r.refunded, r.currency)}"
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
            f"Cancel before {_when(until)} for a full refund; later, before the start, "
            f"{late} % is refunded."
        )
    return (
        f"{quote.get('gpu_count')}x {quote.get('gpu_model')} ({quote.get('plan')}) "
        f"from {_when(quote.get('start'))} to {_when(quote.get('end'))}: "
        f"{quote.get('hours')} h, {quote.get('gpu_hours')} GPU-hours at the reserved rate "
        f"{quote.get('hourly_rate')} {cur}/h ({_percent(quote.get('discount'))} off).\n"
        f"Price: {_money(quote.get('price'), cur)}, paid now. {policy}"
    )


def _confirm(question: str, refusal: str) -> bool:
    """Ask on a terminal; without one, refuse with ``refusal`` (a usage error)."""
    if not sys.stdin.isatty():
        raise _UsageError(refusal)
    return _ask(f"{question} [y/N] ").lower() in ("y", "yes")


def cmd_reserve(args: argparse.Namespace) -> int:
    if args.end is not None and args.end <= args.start:
        raise _UsageError("--end must be after --start")
    end = args.end or args.start + timedelta(minutes=int(args.hours * 60))
    choice = {"gpu_model": args.model, "gpu_count": args.count}
    with _client() as client:
        quote = client.quote(start=args.start, end=end, **choice)
        if not args.json:
            _say(_quote_text(quote))
        if not args.yes:
            price = _money(quote.get("price"), quote.get("currency") or "")
            if not _confirm(f"Book and pay {price}?", f"booking charges {price} now; pass --yes"):
                _warn("not booked")
                return UNEXPECTED
        reservation = client.book(image=args.image, start=args.start, end=end, **choice)
    if args.json:
        _json(reservation.raw)
    else:
        _say(_reservation_line(reservation))
    return OK


def cmd_reservations(args: argparse.Namespace) -> int:
    with _client() as client:
        reservations = client.reservations()
    if args.json:
        _json([r.raw for r in reservations])
        return OK
    _table(
        ["ID", "STATUS", "GPUS", "START", "END", "PRICE", "REFUND NOW", "INSTANCE"],
        [
            [
                r.id,
                r.status,
                f"{r.gpu_count}x {r.gpu_model}",
                _when(r.start),
                _when(r.end),
                _money(r.price, r.currency),
                r.refund_if_cancelled_now,
                r.instance_id,
            ]
            for r in reservations
        ],
    )
    return OK


def cmd_cancel_reservation(args: argparse.Namespace) -> int:
    with _client() as client:
        if not args.yes:
            r = client.get_reservation(args.id)
            if r.refund_if_cancelled_now is None:
                raise InvalidState(
                    f"reservation {r.id} is {r.status}: only a booked reservation can be "
                    "cancelled, before its start",
                    code="invalid_state",
                )
            refund = _money(r.refund_if_cancelled_now, r.currency)
            question = (
                f"Cancel reservation {r.id} ({r.gpu_count}x {r.gpu_model} from "
                f"{_when(r.start)})? You get {refund} of {_money(r.price, r.currency)} back."
            )
            if not _confirm(question, f"cancelling refunds {refund} now; pass --yes"):
                _warn("not cancelled")
                return UNEXPECTED
        reservation = client.cancel_reservation(args.id)
    if args.json:
        _json(reservation.raw)
    else:
        _say(_reservation_line(reservation))
    return OK


def cmd_relaunch(args: argparse.Namespace) -> int:
    with _client() as client:
        instance = client.relaunch_reservation(args.id)
    if args.json:
        _json(instance.raw)
    else:
        _say(_instance_line(instance))
    return OK


def _per_day(hours: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """(local day, fewest free, most free, the largest booking that fits all day)."""
    days: dict[str, list[dict[str, Any]]] = {}
    for slot in hours:
        day = (_when(slot.get("start")) or "?")[:10]
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
    with _client() as client:
        data = client.availability(gpu_model=args.model, hours=args.hours)
    if args.json:
        _json(data)
        return OK
    models = data.get("models") or []
    hourly = args.hourly or (data.get("hours") or 0) <= 48
    rows = []
    for model in models:
        name = model.get("short_name") or model.get("gpu_model")
        if hourly:
            rows += [
                [name, _when(s.get("start")), f"{s['free']}/{model['total']}", s["largest_block"]]
                for s in model.get("hours") or []
            ]
        else:
            rows += [
                [name, day, f"{low}-{high}/{model['total']}", block]
                for day, low, high, block in _per_day(model.get("hours") or [])
            ]
    _table(["GPU", "HOUR" if hourly else "DAY", "FREE", "ONE HOST"], rows)
    if not hourly:
        _say("ONE HOST: the most GPUs free on one host all day (the largest booking that fits).")
    return OK


def cmd_usage(args: argparse.Namespace) -> int:
    with _client() as client:
        if args.csv:
            sys.stdout.flush()
            sys.stdout.buffer.write(client.usage_csv(args.month))
            sys.stdout.buffer.flush()
            return OK
        data = client.usage(args.month)
    if args.json:
        _json(data)
        return OK
    cur = data.get("currency") or ""
    totals = data.get("totals") or {}
    rows = [
        [r["day"], r["instance_name"], r["plan"], r["gpu_hours"], r["cost"]]
        for r in data.get("rows") or []
    ]
    rows.append(["total", None, None, totals.get("gpu_hours"), totals.get("cost")])
    _say(f"Usage in {data.get('month')} ({cur}):")
    _table(["DAY", "INSTANCE", "PLAN", "GPU-HOURS", "COST"], rows)
    return OK


def cmd_invoices(args: argparse.Namespace) -> int:
    with _client() as client:
        invoices = client.invoices()
    if args.json:
        _json(invoices)
        return OK
    _table(
        ["ID", "NUMBER", "KIND", "PERIOD", "STATUS", "TOTAL"],
        [
            [
                i.get("id"),
                i.get("number"),
                i.get("kind"),
                str(i.get("period_start", ""))[:7],
                i.get("status"),
                _money(i.get("total"), i.get("currency") or ""),
            ]
            for i in invoices
        ],
    )
    return OK


def cmd_invoice(args: argparse.Namespace) -> int:
    with _client() as client:
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
            _json({"id": args.id, "file": target, "bytes": len(content)})
        else:
            _say(f"saved invoice {args.id} to {target} ({len(content)} bytes)")
        return OK
    if args.json:
        _json(invoice)
        return OK
    cur = invoice.get("currency") or ""
    _say(
        f"{invoice.get('number')} ({invoice.get('kind')}, {invoice.get('status')}): "
        f"{invoice.get('period_start')} to {invoice.get('period_end')}, "
        f"total {_money(invoice.get('total'), cur)}"
    )
    _table(
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


# Parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpurental",
        description="Rent GPU containers with JupyterLab from a gpurental server.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpurental {__version__}")
    parser.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    # SUPPRESS: a subcommand's default must not undo `gpurental --json ls`.
    common = _Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON on stdout"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], help: str) -> Any:
        p = sub.add_parser(
            name,
            help=help,
            description=help,
            parents=[common],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(handler=handler)
        return p

    p = command("login", cmd_login, "check an API key against a server and save both")
    p.add_argument("--api-key", help="API key (gpr_…); prompted for, or read from stdin")
    p.add_argument("--url", help=f"server URL (default {config.DEFAULT_URL})")

    command("gpus", cmd_gpus, "GPU models: free/total and the lowest price per GPU-hour")

    p = command("launch", cmd_launch, "launch an instance and print its JupyterLab URL")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--gpu", metavar="MODEL", help="GPU model short name or slug (A10G)")
    what.add_argument("--plan", metavar="SLUG", help="a plan (fixes GPU model and count)")
    p.add_argument("--count", type=_positive_int, help="GPUs, with --gpu (default 1)")
    p.add_argument("--image", required=True, metavar="SLUG", help="image (pytorch-2.1)")
    p.add_argument("--name", help="a name to tell instances apart")
    p.add_argument(
        "--model-repo", choices=["huggingface"], help="mount the host's shared model cache"
    )
    p.add_argument(
        "--idle-stop",
        type=_idle_minutes,
        metavar="MINUTES",
        help="stop it after this many idle minutes ('off': never; default: the plan's)",
    )
    p.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait until JupyterLab answers, then print its URL (default: wait)",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait (default 600)")

    p = command("ls", cmd_ls, "list your instances")
    p.add_argument("--status", choices=STATUSES)

    p = command("open", cmd_open, "print an instance's JupyterLab URL and open a browser")
    p.add_argument("id")
    p.add_argument("--print", action="store_true", help="only print the URL (so does --json)")

    for name, text in (
        ("stop", "stop an instance (its /workspace is kept)"),
        ("start", "start a stopped instance again"),
        ("restart", "restart an instance"),
    ):
        command(name, _action(name), text).add_argument("id")

    p = command("terminate", cmd_terminate, "terminate an instance and delete its /workspace")
    p.add_argument("id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = command("idle-stop", cmd_idle_stop, "set an instance's idle auto-stop (or 'off')")
    p.add_argument("id")
    p.add_argument("minutes", type=_idle_minutes, metavar="MINUTES|off")

    p = command("reserve", cmd_reserve, "book GPUs ahead at the reserved rate (shows the price)")
    p.add_argument("model", metavar="MODEL", help="GPU model short name or slug (A100)")
    p.add_argument("count", metavar="COUNT", type=_positive_int, help="how many GPUs")
    p.add_argument("--start", required=True, type=_time_arg, metavar="TIME", help="ISO 8601")
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--hours", type=_hours_arg, metavar="H", help="how long")
    length.add_argument("--end", type=_time_arg, metavar="TIME", help="ISO 8601, exclusive")
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
    p.add_argument("--hours", type=_positive_int, help="how far ahead (default: the horizon)")
    p.add_argument("--hourly", action="store_true", help="one row per hour (default up to 48 h)")

    p = command("usage", cmd_usage, "GPU-hours and cost per instance per day, for a month")
    p.add_argument("--month", type=_month_arg, metavar="YYYY-MM", help="default: this month")
    p.add_argument("--csv", action="store_true", help="the CSV report on stdout")

    command("invoices", cmd_invoices, "list your invoices")

    p = command("invoice", cmd_invoice, "show an invoice, or save it as PDF or CSV")
    p.add_argument("id")
    document = p.add_mutually_exclusive_group()
    document.add_argument("--pdf", metavar="FILE", help="save the PDF here (- for stdout)")
    document.add_argument("--csv", metavar="FILE", help="save the CSV here (- for stdout)")
    return parser


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else USAGE
    if not args.command:
        parser.print_help(sys.stderr)
        return USAGE
    try:
        return args.handler(args)
    except _UsageError as exc:
        _warn(str(exc))
        return USAGE
    except GpuRentalError as exc:
        _warn(str(exc))
        return exit_code_for(exc)
    except KeyboardInterrupt:
        _warn("interrupted")
        return INTERRUPTED
    except BrokenPipeError:
        # `gpurental ls | head` closed stdout early: not worth a traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except Exception as exc:
        _warn(f"unexpected error: {exc!r} (GPURENTAL_DEBUG=1 shows the traceback)")
        if os.environ.get("GPURENTAL_DEBUG"):
            traceback.print_exc()
        return UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
