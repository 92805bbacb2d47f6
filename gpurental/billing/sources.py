"""Charges that other apps meter and billing invoices: each app registers, when Django
starts (its AppConfig.ready), how to make its invoice lines for a month, which ledger
debits stand behind one of its lines (what a credit note on it pays back), and its rows of
a customer's usage report. So billing invoices and reports them without importing them
(gpurental/storage/ registers storage)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from gpurental.billing.models import InvoiceLine, LedgerEntry


@dataclass(frozen=True)
class LineSource:
    name: str
    # (month start, month end, user ids or None for all) → {user id: unsaved lines}
    lines: Callable[[datetime, datetime, list | None], dict[int, list[InvoiceLine]]]
    # (a line, month start, month end) → its debits, or None when the line is not this source's
    debits: Callable[[InvoiceLine, datetime, datetime], QuerySet[LedgerEntry] | None]
    # (user id, start, end) → billing.selectors.UsageRow per thing per local day, for the
    # charges starting in [start, end)
    usage: Callable[[int, datetime, datetime], list] | None = None


SOURCES: dict[str, LineSource] = {}


def register(source: LineSource) -> None:
    SOURCES[source.name] = source  # by name: a second ready() (tests) replaces, not adds


def lines_of(start: datetime, end: datetime, user_ids=None) -> dict[int, list[InvoiceLine]]:
    found: dict[int, list[InvoiceLine]] = {}
    for source in SOURCES.values():
        for user_id, lines in source.lines(start, end, user_ids).items():
            found.setdefault(user_id, []).extend(lines)
    return found


def debits_of(line: InvoiceLine, start: datetime, end: datetime) -> QuerySet[LedgerEntry] | None:
    for source in SOURCES.values():
        found = source.debits(line, start, end)
        if found is not None:
            return found
    return None


def usage_of(user_id: int, start: datetime, end: datetime) -> list:
    return [
        row
        for source in SOURCES.values()
        if source.usage is not None
        for row in source.usage(user_id, start, end)
    ]
