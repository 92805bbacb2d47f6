"""This month's spend, live, and its forecast: the console's figures, checked by hand."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpurental.billing.selectors import month_spend
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.services import reservations as rs
from tests.billing.conftest import beat
from tests.factories import PlanFactory

T0 = datetime(2026, 6, 10, 8, 0, tzinfo=UTC)  # 10:00 in Berlin: peak


def test_spend_is_charges_plus_reservations_plus_unbilled_time_and_the_forecast_runs_on(
    berlin, funded, plan, image, make_host, run_instance
):
    host = make_host("node1", plan.gpu_model, count=4)
    run_instance(funded, plan, host, T0)  # 2× H100, 4.00/h; 3.00/h 00:00–08:00 Berlin
    beat(host, T0 + timedelta(hours=2))
    meter_run(now=T0 + timedelta(hours=2))  # 8.00 charged
    single = PlanFactory(
        gpu_model=plan.gpu_model,
        gpu_count=1,
        slug="h100-x1",
        hourly_rate=Decimal("2.0000"),
        reserved_discount=Decimal("0.15"),
    )
    start = datetime(2026, 6, 20, 10, 0, tzinfo=UTC)
    rs.reservation_book(
        user=funded, plan=single, image=image, start=start, end=start + timedelta(hours=2), now=T0
    )  # 2 h × 2.00 × 0.85 = 3.40, paid at booking
    now = T0 + timedelta(hours=4)  # 14:00 Berlin: 2 h run since the meter, 8.00 unbilled

    spend = month_spend(user=funded, now=now)
    assert (spend.charged, spend.reserved, spend.unbilled) == (
        Decimal("8.00"),
        Decimal("3.40"),
        Decimal("8.00"),
    )
    assert spend.total == Decimal("19.40")
    # To 1 July 00:00 Berlin (30 June 22:00 UTC): 490 h, of which 20 nights × 8 h off-peak.
    assert spend.month_end == datetime(2026, 6, 30, 22, 0, tzinfo=UTC)
    assert spend.forecast == Decimal("19.40") + 330 * 4 + 160 * 3


def test_a_cancelled_reservation_counts_only_what_was_kept(berlin, funded, plan, image, make_host):
    make_host("node1", plan.gpu_model, count=2)
    start = datetime(2026, 6, 20, 10, 0, tzinfo=UTC)
    reservation = rs.reservation_book(
        user=funded, plan=plan, image=image, start=start, end=start + timedelta(hours=1), now=T0
    )
    assert month_spend(user=funded, now=T0).reserved == reservation.price
    rs.reservation_cancel(reservation=reservation, actor=funded, now=T0)  # days ahead: in full
    spend = month_spend(user=funded, now=T0)
    assert spend.reserved == Decimal("0.00") and spend.total == spend.forecast == Decimal("0.00")
