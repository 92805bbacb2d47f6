"""Prices of GPU time: pure functions of numbers and instants, no database.

A plan has one hourly rate for the whole plan, an off-peak discount inside a daily
window given in the operator's time zone (``00:00–08:00``; a window like
``22:00–06:00`` wraps past midnight; equal ends mean no window), and a reserved
discount for booked capacity (which replaces the off-peak discount, it does not
stack).

``price_interval`` cuts ``[start, end)`` wherever the local wall clock crosses a
window edge or midnight, and at every UTC-offset change (DST) inside it: so each
segment has one rate kind and lies within one local day. Which side of an edge an
instant is on is decided by its local wall-clock time; how long a segment lasts is
real elapsed time (the 25-hour autumn night is billed 25 hours).

Amounts are exact sums. Each segment costs ``cost_to(end) - cost_to(start)``, where
``cost_to(t)`` is what the rate would cost from the Unix epoch up to ``t``, to
20 decimal places. Decimal cannot hold ``rate × seconds / 3600`` exactly (3600 has
the factor 9), but differences of one rounded running total telescope: pricing an
interval gives exactly the sum of pricing its parts, wherever it is split. Charges
use the same running total rounded to 6 places (``charge_amount``), so a month's
charges add up to the same figure however often the meter ran. ``quantize_money``
is the only rounding for money leaving this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from zoneinfo import ZoneInfo

PEAK = "peak"
OFF_PEAK = "off_peak"
RESERVED = "reserved"
NO_GPU = "no_gpu"  # an instance started without its GPUs (no-GPU mode): one flat rate


def gettext_noop(text: str) -> str:
    """Marks ``text`` for the translation catalogues (makemessages reads this name) and
    keeps this module free of Django; callers translate the label when they write it."""
    return text


KIND_LABELS = (
    (PEAK, gettext_noop("peak")),
    (OFF_PEAK, gettext_noop("off-peak")),
    (RESERVED, gettext_noop("reserved")),
    (NO_GPU, gettext_noop("without GPUs")),
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
US_PER_HOUR = 3_600_000_000
EXACT_PLACES = 20
# Running totals since 1970 reach ~10^7 for the dearest plans: 60 digits hold them to
# 20 places with room to spare.
_CONTEXT = Context(prec=60, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Tariff:
    """The price terms of one plan, with the zone its off-peak window is in."""

    hourly_rate: Decimal
    zone: ZoneInfo
    off_peak_discount: Decimal = Decimal("0")
    off_peak_start: time = time(0, 0)
    off_peak_end: time = time(0, 0)
    reserved_discount: Decimal = Decimal("0")

    @classmethod
    def of(cls, plan, zone: ZoneInfo) -> Tariff:
        """From a ``catalog.Plan`` (or anything with its price fields)."""
        return cls(
            hourly_rate=plan.hourly_rate,
            zone=zone,
            off_peak_discount=plan.off_peak_discount,
            off_peak_start=plan.off_peak_start,
            off_peak_end=plan.off_peak_end,
            reserved_discount=plan.reserved_discount,
        )

    def rate(self, kind: str) -> Decimal:
        if kind == OFF_PEAK:
            return self.hourly_rate * (1 - self.off_peak_discount)
        if kind == RESERVED:
            return self.hourly_rate * (1 - self.reserved_discount)
        return self.hourly_rate

    def is_off_peak(self, wall: time) -> bool:
        """Whether a local wall-clock time is inside the window [start, end)."""
        start, end = self.off_peak_start, self.off_peak_end
        if start < end:
            return start <= wall < end
        if start > end:  # wraps past midnight
            return wall >= start or wall < end
        return False


@dataclass(frozen=True)
class Segment:
    start: datetime  # UTC
    end: datetime  # UTC
    rate_kind: str
    seconds: Decimal  # real elapsed seconds, exact to the microsecond
    hourly_rate: Decimal  # for the whole plan, after any discount
    amount: Decimal  # exact to 1e-20; see the module docstring


def quantize_money(amount: Decimal, places: int = 2) -> Decimal:
    """The one rounding of money: half up, to ``places`` (2 on invoices, 6 on charges)."""
    with localcontext(_CONTEXT):
        return amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def cost_to(moment: datetime, hourly_rate: Decimal, places: int = EXACT_PLACES) -> Decimal:
    """What ``hourly_rate`` costs from the Unix epoch up to ``moment``, to ``places``."""
    micros = (moment - EPOCH) // MICROSECOND
    with localcontext(_CONTEXT):
        return quantize_money(hourly_rate * micros / US_PER_HOUR, places)


def charge_amount(segment: Segment, places: int = 6) -> Decimal:
    """A segment's amount at the places a charge keeps, rounded without drift: the rounded
    running totals at both ends are subtracted, so consecutive charges add up to the
    rounded whole and the meter's schedule cannot change a bill."""
    return cost_to(segment.end, segment.hourly_rate, places) - cost_to(
        segment.start, segment.hourly_rate, places
    )


def price_interval(
    start: datetime, end: datetime, tariff: Tariff, *, reserved: bool = False
) -> list[Segment]:
    """The segments of ``[start, end)``, in order; empty when ``end <= start``."""
    start, end = _utc(start), _utc(end)
    if end <= start:
        return []
    cuts = [start, *(c for c in _cuts(start, end, tariff) if start < c < end), end]
    pieces: list[tuple[datetime, datetime, str]] = []
    for piece_start, piece_end in zip(cuts, cuts[1:], strict=False):
        kind = _kind_at(piece_start, tariff, reserved)
        if pieces and pieces[-1][2] == kind and _same_day(pieces[-1][0], piece_start, tariff.zone):
            pieces[-1] = (pieces[-1][0], piece_end, kind)  # a cut where nothing changes
        else:
            pieces.append((piece_start, piece_end, kind))
    return [_segment(s, e, kind, tariff.rate(kind)) for s, e, kind in pieces]


def total(segments: Iterable[Segment]) -> Decimal:
    return sum((s.amount for s in segments), Decimal(0))


def reservation_refund(
    price: Decimal,
    *,
    start: datetime,
    now: datetime,
    full_refund_before: timedelta,
    late_percent: int,
) -> Decimal | None:
    """What cancelling a reservation paid ``price`` gives back at ``now``: all of it up to
    ``full_refund_before`` ahead of ``start``, ``late_percent`` % of it later, and ``None``
    (no cancelling) once it has started."""
    if now >= start:
        return None
    if start - now >= full_refund_before:
        return price
    return quantize_money(price * Decimal(late_percent) / 100)


def local_month(year: int, month: int, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """[first midnight of the month, first midnight of the next) in ``zone``, as UTC."""
    following = (year + 1, 1) if month == 12 else (year, month + 1)
    return (
        datetime(year, month, 1, tzinfo=zone).astimezone(UTC),
        datetime(*following, 1, tzinfo=zone).astimezone(UTC),
    )


# --- building blocks ----------------------------------------------------------


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("pricing needs aware datetimes")
    # Arithmetic on two datetimes sharing a tzinfo ignores DST: work in UTC only.
    return moment.astimezone(UTC)


def _segment(start: datetime, end: datetime, kind: str, rate: Decimal) -> Segment:
    micros = (end - start) // MICROSECOND
    return Segment(
        start=start,
        end=end,
        rate_kind=kind,
        seconds=Decimal(micros).scaleb(-6),
        hourly_rate=rate,
        amount=cost_to(end, rate) - cost_to(start, rate),
    )


def _kind_at(moment: datetime, tariff: Tariff, reserved: bool) -> str:
    if reserved:
        return RESERVED
    wall = moment.astimezone(tariff.zone).time()
    return OFF_PEAK if tariff.is_off_peak(wall) else PEAK


def _same_day(a: datetime, b: datetime, zone: ZoneInfo) -> bool:
    return a.astimezone(zone).date() == b.astimezone(zone).date()


def _cuts(start: datetime, end: datetime, tariff: Tariff) -> list[datetime]:
    """Every instant in or near [start, end) where the rate kind or the local day may change."""
    zone = tariff.zone
    walls = {time(0, 0), tariff.off_peak_start, tariff.off_peak_end}
    first = start.astimezone(zone).date() - timedelta(days=1)
    last = end.astimezone(zone).date() + timedelta(days=1)
    cuts: set[datetime] = set()
    day = first
    while day <= last:
        for wall in walls:
            cuts.update(_instants_at(day, wall, zone))
        cuts.update(_offset_changes(day, zone))
        day += timedelta(days=1)
    return sorted(cuts)


def _instants_at(day: date, wall: time, zone: ZoneInfo) -> Iterator[datetime]:
    """The real instants at which the local clock shows ``day wall``: two in the repeated
    autumn hour, none in the skipped spring hour (the offset change is cut there)."""
    for fold in (0, 1):
        moment = datetime.combine(day, wall, tzinfo=zone).replace(fold=fold).astimezone(UTC)
        local = moment.astimezone(zone)
        if (local.date(), local.time()) == (day, wall):
            yield moment


def _offset_changes(day: date, zone: ZoneInfo) -> Iterator[datetime]:
    """UTC instants during the local ``day`` where the zone's UTC offset changes."""
    lo = datetime.combine(day, time(0, 0), tzinfo=zone).astimezone(UTC) - timedelta(hours=3)
    hi = lo + timedelta(hours=30)
    if lo.astimezone(zone).utcoffset() == hi.astimezone(zone).utcoffset():
        return
    # One change a day at most in real zones: bisect to the second (changes fall on whole
    # seconds), keeping ``lo`` before and ``hi`` at or after it.
    before = lo.astimezone(zone).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) // 2
        mid = mid.replace(microsecond=0)
        if mid <= lo:
            mid = lo + timedelta(seconds=1)
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    yield hi
