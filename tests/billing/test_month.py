"""A whole month in Berlin, October 2026, metered at odd moments: totals against arithmetic
done by hand.

Plan: 2× H100 at 4.00/h (whole plan), 25 % off 00:00–08:00 local: 3.00/h off-peak.
Summer time ends on Sunday 25 October: 03:00 CEST becomes 02:00 CET (UTC+2 → UTC+1).

Instance A:
  run 1  Thu  1 Oct 10:00 CEST → 20:00 CEST     10 h peak                      = 40.00
  run 2  Fri  2 Oct 22:00 CEST → Sat 3 Oct 10:00 CEST, restarted in place at 02:00
                 22:00–24:00   2 h peak   8.00
                 00:00–08:00   8 h off    24.00
                 08:00–10:00   2 h peak   8.00                                 = 40.00
  run 3  Sat 24 Oct 20:00 CEST → Sun 25 Oct 12:00 CET (17 real hours)
                 20:00–24:00   4 h peak   16.00
                 00:00–08:00   9 h off    27.00  (the night has 9 real hours)
                 08:00–12:00   4 h peak   16.00                                = 59.00
  run 4  Sat 31 Oct 22:00 CET; the host's last heartbeat is Sun 1 Nov 01:30 CET and it
         is found lost at 01:45: billing ends at 01:30.
                 October  22:00–24:00   2 h peak   8.00                        =  8.00
                 November 00:00–01:30   1.5 h off  4.50 (on November's invoice)
Instance B: launched 15 Oct, failed before running: nothing.

October: peak 10 + 2 + 2 + 4 + 4 + 2 = 24 h → 96.00, 48 GPU-hours
         off-peak 8 + 9           = 17 h → 51.00, 34 GPU-hours
         total 147.00 for 41 h, 82 GPU-hours.
"""

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from gpurental.billing.models import Charge, InvoiceLine
from gpurental.billing.pricing import local_month
from gpurental.billing.selectors import balance_of, usage_by_day
from gpurental.billing.services.invoicing import invoice_generate, invoices_generate
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from gpurental.storage.models import StoragePrice
from tests.billing.conftest import beat

BERLIN = ZoneInfo("Europe/Berlin")


def local(*args):
    return datetime(*args, tzinfo=BERLIN)


@pytest.mark.slow  # a month of transitions, metered minute by minute
def test_a_month_of_stops_restarts_nights_dst_and_a_lost_host(
    berlin, funded, plan, image, make_host, run_instance, stop_instance, start_instance, sent
):
    # GPU time alone: a stopped workspace's storage is tests/billing/test_storage.py's.
    StoragePrice.objects.filter(kind="workspace").update(gb_month=0)
    host = make_host("node1", plan.gpu_model)
    last_beat = local(2026, 11, 1, 1, 30)
    state = {}

    def a_run_1():
        state["a"] = run_instance(funded, plan, host, local(2026, 10, 1, 10), name="A")

    def b_launch():
        state["b"] = lc.instance_launch(
            user=funded, image=image, plan=plan, name="B", now=local(2026, 10, 15, 12)
        )

    def b_fails():
        lc.instance_report_failed(
            instance_id=str(state["b"].pk), reason="image missing", now=local(2026, 10, 15, 12, 5)
        )

    def restart():
        lc.instance_restart(instance=state["a"], now=local(2026, 10, 3, 2))

    def restarted():
        lc.instance_report_running(
            instance_id=str(state["a"].pk),
            port=4001,
            container_id="c2",
            now=local(2026, 10, 3, 2, 1),
        )

    events = [
        (local(2026, 10, 1, 10), a_run_1),
        (local(2026, 10, 1, 20), lambda: stop_instance(state["a"], local(2026, 10, 1, 20))),
        (local(2026, 10, 2, 22), lambda: start_instance(state["a"], local(2026, 10, 2, 22))),
        (local(2026, 10, 3, 2), restart),
        (local(2026, 10, 3, 2, 1), restarted),
        (local(2026, 10, 3, 10), lambda: stop_instance(state["a"], local(2026, 10, 3, 10))),
        (local(2026, 10, 15, 12), b_launch),
        (local(2026, 10, 15, 12, 5), b_fails),
        (local(2026, 10, 24, 20), lambda: start_instance(state["a"], local(2026, 10, 24, 20))),
        (local(2026, 10, 25, 12), lambda: stop_instance(state["a"], local(2026, 10, 25, 12))),
        (local(2026, 10, 31, 22), lambda: start_instance(state["a"], local(2026, 10, 31, 22))),
        (last_beat, lambda: None),  # the agent's last heartbeat
        (local(2026, 11, 1, 1, 45), lambda: fleet_reconcile(now=local(2026, 11, 1, 1, 45))),
    ]
    # The meter runs every 97 minutes (and at 01:40, after the last heartbeat, when the
    # host is late but not yet lost), at moments that fall on none of the edges above.
    ticks = []
    at = local(2026, 9, 30, 23, 13)
    while at < local(2026, 11, 1, 3):
        ticks.append((at, None))
        at += timedelta(minutes=97)
    ticks.append((local(2026, 11, 1, 1, 40), None))
    for at, action in sorted(events + ticks, key=lambda item: item[0]):
        if at <= last_beat:
            beat(host, at)
        if action is None:
            meter_run(now=at)
        else:
            action()
    meter_run(now=local(2026, 11, 2))

    a, b = state["a"], state["b"]
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.status == InstanceStatus.LOST and a.stopped_at == last_beat
    assert b.status == InstanceStatus.FAILED
    assert not Charge.objects.filter(instance=b).exists()

    october = invoice_generate(user=funded, year=2026, month=10)
    lines = {
        (line.instance_id, line.rate_kind): (line.gpu_hours, line.amount)
        for line in october.lines.all()
    }
    assert lines == {
        (a.pk, "peak"): (Decimal("48.0000"), Decimal("96.00")),
        (a.pk, "off_peak"): (Decimal("34.0000"), Decimal("51.00")),
    }
    assert october.total == Decimal("147.00")

    november = invoice_generate(user=funded, year=2026, month=11)
    assert [(line.rate_kind, line.gpu_hours, line.amount) for line in november.lines.all()] == [
        ("off_peak", Decimal("3.0000"), Decimal("4.50"))
    ]
    # Every run starts and ends on a whole or half hour, so even the charges' sixth
    # decimal is exact: 1000 − 147 − 4.50.
    assert balance_of(user=funded) == Decimal("848.500000")

    # The batch run over all customers writes the same lines.
    assert invoices_generate(year=2026, month=10) == 1
    again = {
        (line.instance_id, line.rate_kind): (line.gpu_hours, line.amount)
        for line in InvoiceLine.objects.filter(invoice=october)
    }
    assert again == lines

    # The DST day in the usage report: 9 h off-peak + 4 h peak = 13 real hours.
    start, end = local_month(2026, 10, BERLIN)
    days = {row.day.day: row for row in usage_by_day(user=funded, start=start, end=end)}
    assert days[25].gpu_hours == 26 and days[25].cost == Decimal("43.000000")
    assert days[24].gpu_hours == 8 and days[24].cost == Decimal("16.000000")
    assert sorted(days) == [1, 2, 3, 24, 25, 31]
