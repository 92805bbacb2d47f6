"""Pricing is pure: numbers and instants in, segments out. No database here."""

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from gpurental.billing.models import RateKind
from gpurental.billing.pricing import (
    OFF_PEAK,
    PEAK,
    RESERVED,
    Tariff,
    charge_amount,
    local_month,
    price_interval,
    quantize_money,
    total,
)
from gpurental.catalog.models import Plan

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
H = Decimal(3600)


def tariff(zone=BERLIN, rate="4", discount="0.25", start=time(0), end=time(8), reserved="0.15"):
    return Tariff(
        hourly_rate=Decimal(rate),
        zone=zone,
        off_peak_discount=Decimal(discount),
        off_peak_start=start,
        off_peak_end=end,
        reserved_discount=Decimal(reserved),
    )


def summary(segments, zone):
    """(local start, local end, kind, real hours, amount) per segment, for readable asserts."""
    return [
        (
            s.start.astimezone(zone).strftime("%d %H:%M %Z"),
            s.end.astimezone(zone).strftime("%d %H:%M %Z"),
            s.rate_kind,
            s.seconds / H,
            s.amount,
        )
        for s in segments
    ]


# --- worked examples ----------------------------------------------------------


def test_an_ordinary_day_is_split_at_the_window_edges_and_midnight():
    segments = price_interval(
        datetime(2026, 6, 10, 20, tzinfo=BERLIN), datetime(2026, 6, 11, 12, tzinfo=BERLIN), tariff()
    )
    assert summary(segments, BERLIN) == [
        ("10 20:00 CEST", "11 00:00 CEST", PEAK, 4, Decimal("16")),  # 4 h × 4.00
        ("11 00:00 CEST", "11 08:00 CEST", OFF_PEAK, 8, Decimal("24")),  # 8 h × 3.00
        ("11 08:00 CEST", "11 12:00 CEST", PEAK, 4, Decimal("16")),
    ]


def test_autumn_night_has_nine_real_off_peak_hours_in_berlin():
    # 25 Oct 2026: 03:00 CEST becomes 02:00 CET; 00:00–08:00 local lasts 9 real hours.
    segments = price_interval(
        datetime(2026, 10, 24, 20, tzinfo=BERLIN),
        datetime(2026, 10, 25, 12, tzinfo=BERLIN),
        tariff(),
    )
    assert summary(segments, BERLIN) == [
        ("24 20:00 CEST", "25 00:00 CEST", PEAK, 4, Decimal("16")),
        ("25 00:00 CEST", "25 08:00 CET", OFF_PEAK, 9, Decimal("27")),  # 9 h × 3.00
        ("25 08:00 CET", "25 12:00 CET", PEAK, 4, Decimal("16")),
    ]
    assert total(segments) == Decimal("59")  # 17 real hours


def test_spring_night_has_seven_real_off_peak_hours_in_berlin():
    # 29 Mar 2026: 02:00 CET becomes 03:00 CEST.
    segments = price_interval(
        datetime(2026, 3, 28, 20, tzinfo=BERLIN), datetime(2026, 3, 29, 12, tzinfo=BERLIN), tariff()
    )
    assert summary(segments, BERLIN) == [
        ("28 20:00 CET", "29 00:00 CET", PEAK, 4, Decimal("16")),
        ("29 00:00 CET", "29 08:00 CEST", OFF_PEAK, 7, Decimal("21")),
        ("29 08:00 CEST", "29 12:00 CEST", PEAK, 4, Decimal("16")),
    ]


def test_an_edge_in_the_skipped_spring_hour_takes_effect_when_the_clock_jumps():
    # Window 02:30–06:00: the clock goes 01:59:59 CET → 03:00 CEST, past 02:30.
    segments = price_interval(
        datetime(2026, 3, 29, 0, tzinfo=BERLIN),
        datetime(2026, 3, 29, 8, tzinfo=BERLIN),
        tariff(start=time(2, 30), end=time(6)),
    )
    assert summary(segments, BERLIN) == [
        ("29 00:00 CET", "29 03:00 CEST", PEAK, 2, Decimal("8")),  # 2 real hours
        ("29 03:00 CEST", "29 06:00 CEST", OFF_PEAK, 3, Decimal("9")),
        ("29 06:00 CEST", "29 08:00 CEST", PEAK, 2, Decimal("8")),
    ]


def test_an_edge_in_the_repeated_autumn_hour_is_crossed_twice():
    # Window 02:30–06:00: 02:30–03:00 CEST is off-peak, then the clock shows 02:00 CET
    # again (peak until 02:30 CET), then off-peak again: wall-clock time decides.
    segments = price_interval(
        datetime(2026, 10, 25, 0, tzinfo=BERLIN),
        datetime(2026, 10, 25, 7, tzinfo=BERLIN),
        tariff(start=time(2, 30), end=time(6)),
    )
    assert [(s.rate_kind, s.seconds / H) for s in segments] == [
        (PEAK, Decimal("2.5")),  # 00:00–02:30 CEST
        (OFF_PEAK, Decimal("0.5")),  # 02:30–03:00 CEST
        (PEAK, Decimal("0.5")),  # 02:00–02:30 CET
        (OFF_PEAK, Decimal("3.5")),  # 02:30–06:00 CET
        (PEAK, Decimal("1")),
    ]


def test_new_york_spring_forward_inside_a_window_that_wraps_midnight():
    # 8 Mar 2026 02:00 EST → 03:00 EDT; window 22:00–06:00.
    segments = price_interval(
        datetime(2026, 3, 7, 20, tzinfo=NEW_YORK),
        datetime(2026, 3, 8, 10, tzinfo=NEW_YORK),
        tariff(zone=NEW_YORK, start=time(22), end=time(6)),
    )
    assert summary(segments, NEW_YORK) == [
        ("07 20:00 EST", "07 22:00 EST", PEAK, 2, Decimal("8")),
        ("07 22:00 EST", "08 00:00 EST", OFF_PEAK, 2, Decimal("6")),
        ("08 00:00 EST", "08 06:00 EDT", OFF_PEAK, 5, Decimal("15")),  # 6 wall hours, 5 real
        ("08 06:00 EDT", "08 10:00 EDT", PEAK, 4, Decimal("16")),
    ]


def test_new_york_fall_back_inside_a_window_that_wraps_midnight():
    # 1 Nov 2026 02:00 EDT → 01:00 EST: 22:00–06:00 lasts 9 real hours.
    segments = price_interval(
        datetime(2026, 10, 31, 22, tzinfo=NEW_YORK),
        datetime(2026, 11, 1, 6, tzinfo=NEW_YORK),
        tariff(zone=NEW_YORK, start=time(22), end=time(6)),
    )
    assert sum(s.seconds for s in segments) / H == 9
    assert {s.rate_kind for s in segments} == {OFF_PEAK}
    assert total(segments) == Decimal("27")


def test_a_window_that_wraps_midnight_in_utc():
    segments = price_interval(
        datetime(2026, 6, 1, 20, tzinfo=UTC),
        datetime(2026, 6, 2, 8, tzinfo=UTC),
        tariff(zone=ZoneInfo("UTC"), start=time(22), end=time(6)),
    )
    assert [(s.rate_kind, s.seconds / H) for s in segments] == [
        (PEAK, 2),
        (OFF_PEAK, 2),  # 22:00–24:00
        (OFF_PEAK, 6),  # 00:00–06:00, the next day
        (PEAK, 2),
    ]


def test_reserved_time_has_the_reserved_rate_all_day_and_no_off_peak():
    segments = price_interval(
        datetime(2026, 6, 10, 20, tzinfo=BERLIN),
        datetime(2026, 6, 11, 12, tzinfo=BERLIN),
        tariff(),
        reserved=True,
    )
    assert [(s.rate_kind, s.seconds / H, s.hourly_rate) for s in segments] == [
        (RESERVED, 4, Decimal("3.40")),  # 4.00 less 15 %
        (RESERVED, 12, Decimal("3.40")),  # cut at midnight only
    ]
    assert total(segments) == Decimal("54.4")


def test_equal_window_ends_mean_no_off_peak():
    segments = price_interval(
        datetime(2026, 6, 10, tzinfo=UTC),
        datetime(2026, 6, 10, 12, tzinfo=UTC),
        tariff(zone=ZoneInfo("UTC"), start=time(3), end=time(3)),
    )
    assert [s.rate_kind for s in segments] == [PEAK]


def test_an_empty_or_backwards_interval_costs_nothing():
    at = datetime(2026, 6, 10, tzinfo=UTC)
    assert price_interval(at, at, tariff()) == []
    assert price_interval(at, at - timedelta(hours=1), tariff()) == []


def test_quantize_money_rounds_half_up_once():
    assert quantize_money(Decimal("2.675")) == Decimal("2.68")  # a float would give 2.67
    assert quantize_money(Decimal("0.005")) == Decimal("0.01")
    assert quantize_money(Decimal("0.0366666666"), 6) == Decimal("0.036667")


def test_minute_charges_do_not_drift():
    # 2.20/h for one minute is 0.0366…: rounding each minute alone would bill 2.200020
    # for the hour. Rounded running totals bill exactly 2.200000.
    t = tariff(zone=ZoneInfo("UTC"), rate="2.2", discount="0")
    start = datetime(2026, 6, 10, 10, tzinfo=UTC)
    charges = [
        charge_amount(s)
        for minute in range(60)
        for s in price_interval(
            start + timedelta(minutes=minute), start + timedelta(minutes=minute + 1), t
        )
    ]
    assert sum(charges) == Decimal("2.200000")
    assert {quantize_money(Decimal("2.2") / 60, 6)} != set(charges)  # they do differ


def test_tariff_of_a_plan_reads_its_price_fields():
    plan = Plan(
        hourly_rate=Decimal("8.0000"),
        off_peak_discount=Decimal("0.30"),
        off_peak_start=time(1),
        off_peak_end=time(7),
        reserved_discount=Decimal("0.20"),
    )
    t = Tariff.of(plan, BERLIN)
    assert (t.rate(PEAK), t.rate(OFF_PEAK), t.rate(RESERVED)) == (8, Decimal("5.6"), Decimal("6.4"))


def test_rate_kinds_are_the_models_rate_kinds():
    assert {PEAK, OFF_PEAK, RESERVED} <= set(RateKind.values)


def test_local_month_is_the_operators_month():
    start, end = local_month(2026, 10, BERLIN)
    assert start == datetime(2026, 9, 30, 22, tzinfo=UTC)  # CEST
    assert end == datetime(2026, 10, 31, 23, tzinfo=UTC)  # CET
    assert local_month(2026, 12, BERLIN)[1] == datetime(2026, 12, 31, 23, tzinfo=UTC)


# --- properties -----------------------------------------------------------------

ZONES = st.sampled_from(
    [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",  # a 30-minute DST shift
        "Asia/Kolkata",  # a half-hour offset, no DST
        "America/Santiago",  # DST changes at midnight
    ]
).map(ZoneInfo)
WALL = st.one_of(
    st.builds(time, st.integers(0, 23), st.sampled_from([0, 15, 30, 45])),
    st.times(),
)
TARIFFS = st.builds(
    Tariff,
    hourly_rate=st.decimals(min_value=0, max_value=5000, places=4),
    zone=ZONES,
    off_peak_discount=st.decimals(min_value=0, max_value=Decimal("0.9999"), places=4),
    off_peak_start=WALL,
    off_peak_end=WALL,
    reserved_discount=st.decimals(min_value=0, max_value=Decimal("0.9999"), places=4),
)
# Around DST changes of 2026 more often than chance would pick them.
STARTS = st.one_of(
    st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31)),
    st.sampled_from(
        [
            datetime(2026, 3, 28, 12),
            datetime(2026, 10, 24, 12),
            datetime(2026, 3, 7, 12),
            datetime(2026, 10, 31, 12),
            datetime(2026, 4, 4, 12),
            datetime(2026, 9, 5, 12),
        ]
    ),
).map(lambda d: d.replace(tzinfo=UTC))
DURATIONS = st.one_of(
    st.integers(1, 3 * 24 * 3600 * 10**6),  # up to 3 days, in microseconds
    st.integers(1, 45 * 24 * 3600 * 10**6),  # up to 45 days
).map(lambda us: timedelta(microseconds=us))


@st.composite
def splits(draw):
    start = draw(STARTS)
    length = draw(DURATIONS)
    end = start + length
    total_us = length // timedelta(microseconds=1)
    cuts = draw(st.lists(st.integers(1, max(1, total_us - 1)), max_size=6, unique=True))
    points = sorted({start + timedelta(microseconds=c) for c in cuts if 0 < c < total_us})
    return start, end, points


@settings(max_examples=150, deadline=None)
@given(splits(), TARIFFS, st.booleans())
def test_pricing_an_interval_equals_the_sum_of_pricing_its_parts(split, t, reserved):
    start, end, points = split
    whole = price_interval(start, end, t, reserved=reserved)
    bounds = [start, *points, end]
    parts = [
        s
        for a, b in zip(bounds, bounds[1:], strict=False)
        for s in price_interval(a, b, t, reserved=reserved)
    ]
    assert total(parts) == total(whole)  # exactly, before any rounding
    assert sum(charge_amount(s) for s in parts) == sum(charge_amount(s) for s in whole)
    assert sum(s.seconds for s in parts) == sum(s.seconds for s in whole)


@settings(max_examples=150, deadline=None)
@given(splits(), TARIFFS)
def test_segments_tile_the_interval_with_one_kind_and_one_local_day_each(split, t):
    start, end, _ = split
    segments = price_interval(start, end, t)
    assert segments[0].start == start and segments[-1].end == end
    tick = timedelta(microseconds=1)
    for before, after in zip(segments, segments[1:], strict=False):
        assert before.end == after.start
    for s in segments:
        assert s.end > s.start
        assert s.seconds == Decimal((s.end - s.start) // tick).scaleb(-6)
        assert s.amount >= 0 and charge_amount(s) >= 0
        last = s.end - tick
        middle = s.start + (s.end - s.start) / 2
        for moment in (s.start, middle, last):
            wall = moment.astimezone(t.zone).time()
            assert (OFF_PEAK if t.is_off_peak(wall) else PEAK) == s.rate_kind
        assert s.start.astimezone(t.zone).date() == last.astimezone(t.zone).date()


@settings(max_examples=150, deadline=None)
@given(splits(), TARIFFS)
def test_off_peak_is_never_dearer_than_peak(split, t):
    start, end, _ = split
    no_discount = Tariff(
        hourly_rate=t.hourly_rate,
        zone=t.zone,
        off_peak_start=t.off_peak_start,
        off_peak_end=t.off_peak_end,
    )
    segments = price_interval(start, end, t)
    assert all(s.hourly_rate <= t.hourly_rate for s in segments if s.rate_kind == OFF_PEAK)
    assert total(segments) <= total(price_interval(start, end, no_discount))
    assert total(segments) >= 0
