"""The meter: closed intervals of running instances become charges and ledger entries."""

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum

from gpurental.billing.models import Charge, LedgerEntry
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from tests.billing.conftest import beat

T0 = datetime(2026, 6, 10, 10, 0, 17, tzinfo=UTC)  # Berlin 12:00:17, peak


def charged(instance) -> Decimal:
    return Charge.objects.filter(instance=instance).aggregate(s=Sum("amount"))["s"] or Decimal(0)


def about(amount: Decimal, exact: Decimal) -> bool:
    """Charges round running totals to 6 places: within a millionth of the exact figure."""
    return abs(amount - exact) <= Decimal("0.000001")


def seconds(instance) -> float:
    return sum((end - start).total_seconds() for start, end, _ in spans(instance))


def spans(instance):
    return list(
        Charge.objects.filter(instance=instance)
        .order_by("period_start")
        .values_list("period_start", "period_end", "rate_kind")
    )


def test_only_closed_minutes_of_a_running_instance_are_charged(
    berlin, funded, plan, make_host, run_instance
):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    now = T0 + timedelta(minutes=5, seconds=30)  # 10:05:47
    beat(host, now)
    assert meter_run(now=now) == 1
    charge = Charge.objects.get(instance=instance)
    # From running_since to the last whole UTC minute: 10:00:17 → 10:05:00 = 283 s at 4.00/h.
    assert (charge.period_start, charge.period_end) == (
        T0,
        datetime(2026, 6, 10, 10, 5, tzinfo=UTC),
    )
    assert charge.rate_kind == "peak" and charge.gpu_count == 2
    assert charge.hourly_rate == Decimal("4")
    assert about(charge.amount, Decimal(283) * 4 / 3600)  # 0.3144444…
    entry = LedgerEntry.objects.get(charge=charge)
    assert entry.kind == "usage" and entry.amount == -charge.amount and entry.user == funded
    instance.refresh_from_db()
    assert instance.billed_until == charge.period_end


def test_running_the_meter_twice_charges_once(berlin, funded, plan, make_host, run_instance):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    now = T0 + timedelta(hours=1)
    beat(host, now)
    meter_run(now=now)
    assert meter_run(now=now) == 0
    assert Charge.objects.filter(instance=instance).count() == 1


@pytest.mark.backend
def test_a_watermark_behind_its_charges_cannot_charge_twice(
    berlin, funded, plan, make_host, run_instance
):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    now = T0 + timedelta(minutes=30)
    beat(host, now)
    meter_run(now=now)
    before = charged(instance)
    Instance.objects.filter(pk=instance.pk).update(billed_until=None)  # as if lost
    assert meter_run(now=now) == 0  # the unique constraint refuses the same period_start
    assert charged(instance) == before
    instance.refresh_from_db()
    assert instance.billed_until == datetime(2026, 6, 10, 10, 30, tzinfo=UTC)  # repaired


@pytest.mark.slow  # meters a day under every schedule
def test_meter_schedule_does_not_change_the_bill(berlin, funded, plan, make_host, run_instance):
    host = make_host("node1", plan.gpu_model)
    every_minute = run_instance(funded, plan, host, T0)
    end = T0 + timedelta(hours=3)
    now = T0
    while now < end:
        now += timedelta(minutes=1)
        beat(host, now)
        meter_run(now=now)
    assert Charge.objects.filter(instance=every_minute).count() == 180
    once = run_instance(funded, plan, host, T0)
    beat(host, end)
    meter_run(now=end)
    assert Charge.objects.filter(instance=once).count() == 1
    # Both 10:00:17 → 13:00:00, 10783 s at 4.00/h = 11.98111…, to the millionth alike.
    assert charged(every_minute) == charged(once)
    assert about(charged(once), Decimal(10783) * 4 / 3600)


def test_charges_are_split_at_off_peak_edges_in_the_operators_zone(
    berlin, funded, plan, make_host, run_instance
):
    host = make_host("node1", plan.gpu_model)
    start = datetime(2026, 6, 10, 21, 30, tzinfo=UTC)  # Berlin 23:30
    instance = run_instance(funded, plan, host, start)
    now = datetime(2026, 6, 11, 6, 30, 40, tzinfo=UTC)  # Berlin 08:30:40
    beat(host, now)
    meter_run(now=now)
    assert spans(instance) == [
        (start, datetime(2026, 6, 10, 22, 0, tzinfo=UTC), "peak"),  # to local midnight
        (
            datetime(2026, 6, 10, 22, 0, tzinfo=UTC),
            datetime(2026, 6, 11, 6, 0, tzinfo=UTC),
            "off_peak",
        ),
        (datetime(2026, 6, 11, 6, 0, tzinfo=UTC), datetime(2026, 6, 11, 6, 30, tzinfo=UTC), "peak"),
    ]
    # 0.5 h × 4 + 8 h × 3 + 0.5 h × 4
    assert charged(instance) == Decimal("28.000000")


def test_a_stopped_instance_is_charged_to_the_second_it_stopped(
    berlin, funded, plan, make_host, run_instance, stop_instance
):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    stopped = T0 + timedelta(minutes=10, seconds=3)  # 10:10:20
    stop_instance(instance, stopped)
    meter_run(now=stopped + timedelta(hours=5))
    assert spans(instance)[-1][1] == stopped
    assert about(charged(instance), Decimal("0.67"))  # 603 s × 4 / 3600


def test_a_failed_launch_costs_nothing(berlin, funded, plan, make_host, image, sent):
    host = make_host("node1", plan.gpu_model)
    beat(host, T0)
    instance = lc.instance_launch(user=funded, image=image, plan=plan, now=T0)
    lc.instance_report_failed(
        instance_id=str(instance.pk), reason="no image", now=T0 + timedelta(minutes=3)
    )
    meter_run(now=T0 + timedelta(hours=1))
    assert not Charge.objects.filter(instance=instance).exists()
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.FAILED


def test_time_after_a_silent_hosts_last_heartbeat_is_never_charged(
    berlin, funded, plan, make_host, run_instance
):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    last_beat = T0 + timedelta(minutes=20, seconds=30)  # 10:20:47
    beat(host, last_beat)
    meter_run(now=T0 + timedelta(minutes=21))  # the host is merely late: up to 10:20
    assert spans(instance)[-1][1] == datetime(2026, 6, 10, 10, 20, tzinfo=UTC)
    fleet_reconcile(now=last_beat + timedelta(minutes=5))  # now it is unreachable
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.UNREACHABLE and instance.stopped_at == last_beat
    meter_run(now=last_beat + timedelta(minutes=30))
    assert spans(instance)[-1][1] == last_beat
    fleet_reconcile(now=last_beat + timedelta(minutes=30))  # past HOST_LOST_AFTER: lost
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.LOST and instance.stopped_at == last_beat
    meter_run(now=last_beat + timedelta(hours=2))
    assert spans(instance)[-1][1] == last_beat
    assert about(charged(instance), Decimal(1230) * 4 / 3600)  # 10:00:17 → 10:20:47


def test_starting_again_first_charges_the_last_run_in_full(
    berlin, funded, plan, make_host, run_instance, stop_instance, start_instance
):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    stop_instance(instance, T0 + timedelta(seconds=50))
    # No meter run in between: instance_start clears stopped_at, so it must settle first.
    start_instance(instance, T0 + timedelta(seconds=55))
    assert spans(instance) == [(T0, T0 + timedelta(seconds=50), "peak")]
    now = T0 + timedelta(minutes=2)
    beat(host, now)
    meter_run(now=now)
    assert spans(instance)[1:] == [
        (T0 + timedelta(seconds=55), datetime(2026, 6, 10, 10, 2, tzinfo=UTC), "peak")
    ]


def test_a_restart_in_place_keeps_billing(berlin, funded, plan, make_host, run_instance, sent):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    at = T0 + timedelta(minutes=10)
    beat(host, at)
    lc.instance_restart(instance=instance, now=at)
    now = T0 + timedelta(minutes=30)
    beat(host, now)
    meter_run(now=now)  # provisioning again: the GPUs are still held
    lc.instance_report_running(instance_id=str(instance.pk), port=4001, container_id="d", now=now)
    now = T0 + timedelta(hours=1)
    beat(host, now)
    meter_run(now=now)
    assert spans(instance)[0][0] == T0 and spans(instance)[-1][1] == datetime(
        2026, 6, 10, 11, 0, tzinfo=UTC
    )
    assert about(charged(instance), Decimal(3583) * 4 / 3600)  # 10:00:17 → 11:00:00


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_meters_in_many_threads_charge_each_minute_exactly_once(
    berlin, funded, plan, make_host, run_instance
):
    host = make_host("node1", plan.gpu_model, count=8)
    other = make_host("node2", plan.gpu_model, count=8)
    type(funded).objects.filter(pk=funded.pk).update(gpu_quota=16)
    funded.refresh_from_db()
    instances = [run_instance(funded, plan, host if i < 4 else other, T0) for i in range(8)]
    errors = []

    def meter(now):
        try:
            meter_run(now=now)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    for minutes in (7, 8, 45, 46, 90):
        now = T0 + timedelta(minutes=minutes)
        beat(host, now)
        beat(other, now)
        threads = [threading.Thread(target=meter, args=(now,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    end = datetime(2026, 6, 10, 11, 30, tzinfo=UTC)
    amounts = set()
    for instance in instances:
        rows = spans(instance)
        assert len(rows) == 5  # one charge per meter round, whatever the threads did
        assert rows[0][0] == T0 and rows[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(rows, rows[1:], strict=False))  # no gap, no overlap
        assert seconds(instance) == 5383  # 10:00:17 → 11:30:00
        amounts.add(charged(instance))
    (amount,) = amounts
    assert about(amount, Decimal(5383) * 4 / 3600)
    assert balance_of(user=funded) == Decimal("1000") - 8 * amount
