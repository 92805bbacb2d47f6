"""Reservations: booking, capacity, refunds, and the clock that launches and stops them."""

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import Charge, Invoice, InvoiceLine, LedgerEntry
from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.billing.services.invoicing import invoice_generate, invoice_issue
from gpurental.billing.services.metering import meter_run
from gpurental.fleet.models import Host
from gpurental.rentals import selectors
from gpurental.rentals.exceptions import InvalidTransition, NoCapacity, QuotaExceeded, RentalError
from gpurental.rentals.models import (
    Allocation,
    Instance,
    InstanceEvent,
    InstanceStatus,
    Reservation,
    ReservationStatus,
)
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services import reservations as rs
from tests.factories import GPUModelFactory, PlanFactory, UserFactory

NOW = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)  # Europe/Berlin summer: 11:00 local
START = datetime(2026, 6, 12, 10, 0, tzinfo=UTC)
END = START + timedelta(hours=5)


@pytest.fixture
def h100(db):
    return GPUModelFactory(slug="h100-80gb", name="H100 80GB", short_name="H100")


@pytest.fixture
def plan(h100):
    """2× H100 at 4.00/h; 20 % off reserved: 3.20/h."""
    return PlanFactory(
        gpu_model=h100,
        gpu_count=2,
        slug="h100-x2",
        hourly_rate=Decimal("4.0000"),
        reserved_discount=Decimal("0.20"),
    )


@pytest.fixture
def one(h100):
    return PlanFactory(
        gpu_model=h100,
        gpu_count=1,
        slug="h100-x1",
        hourly_rate=Decimal("2.0000"),
        reserved_discount=Decimal("0.15"),
    )


@pytest.fixture
def node(make_host, h100):
    return make_host("node1", h100, count=2, last_heartbeat_at=NOW)


def beat(host, at):
    Host.objects.filter(pk=host.pk).update(last_heartbeat_at=at)


def book(user, plan, image, start=START, end=END, now=NOW):
    return rs.reservation_book(user=user, plan=plan, image=image, start=start, end=end, now=now)


def test_booking_holds_the_gpus_and_is_paid_at_once_with_the_reserved_discount(
    alice, plan, image, node
):
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    assert reservation.status == ReservationStatus.BOOKED
    assert reservation.price == Decimal("16.00")  # 5 h × 4.00/h (the plan) × 0.8
    assert balance_of(user=alice) == Decimal("84.00")
    debit = LedgerEntry.objects.get(reservation=reservation)
    assert debit.kind == LedgerEntry.Kind.RESERVATION and debit.amount == Decimal("-16.00")
    held = Allocation.objects.filter(reservation=reservation)
    assert held.count() == 2
    assert {a.period.lower for a in held} == {START} and {a.period.upper for a in held} == {END}
    (event,) = reservation.events.all()
    assert event.to_status == "booked" and "node1" in event.reason


def test_the_price_is_the_reserved_rate_and_never_stacks_the_off_peak_discount(
    settings, alice, image, node, h100
):
    settings.TIME_ZONE = "Europe/Berlin"
    night = PlanFactory(
        gpu_model=h100,
        gpu_count=1,
        slug="night",
        hourly_rate=Decimal("3.0000"),
        off_peak_discount=Decimal("0.30"),
        reserved_discount=Decimal("0.15"),
    )
    start = datetime(2026, 6, 11, 22, 0, tzinfo=UTC)  # 00:00–06:00 Berlin: all off-peak
    reservation = book(alice, night, image, start, start + timedelta(hours=6))
    assert reservation.price == Decimal("15.30")  # 6 h × 3.00 × 0.85


def test_bookings_of_the_same_gpus_cannot_overlap(alice, bob, plan, image, node):
    book(alice, plan, image)
    with pytest.raises(NoCapacity) as refused:
        book(bob, plan, image, START + timedelta(hours=4), END + timedelta(hours=4))
    assert refused.value.field == "gpu_count"
    assert "at most 0 together" in refused.value.message
    after = book(bob, plan, image, END, END + timedelta(hours=2))  # back to back is fine
    assert after.status == ReservationStatus.BOOKED
    assert not Reservation.objects.filter(user=bob, status="booked").exclude(pk=after.pk).exists()


def test_on_demand_launches_never_take_gpus_a_reservation_holds(
    alice, bob, plan, one, image, node, sent
):
    book(alice, plan, image)
    with pytest.raises(NoCapacity):
        lc.instance_launch(user=bob, image=image, plan=one, now=NOW)
    assert Allocation.objects.filter(instance__isnull=False).count() == 0


def test_gpus_running_on_demand_cannot_be_booked_ahead(alice, bob, plan, one, image, node, sent):
    lc.instance_launch(user=bob, image=image, plan=one, now=NOW)  # holds one GPU until it stops
    with pytest.raises(NoCapacity) as refused:
        book(alice, plan, image)
    assert "at most 1 together" in refused.value.message


def test_a_booking_the_balance_cannot_pay_is_refused_and_holds_nothing(
    settings, alice, plan, image, node
):
    settings.BILLING_ENFORCE_BALANCE = True
    credit_add(user=alice, amount=Decimal("10.00"))
    with pytest.raises(InsufficientBalance) as refused:
        book(alice, plan, image)
    assert "costs 16.00" in refused.value.message and "6.00" in refused.value.message
    assert not Reservation.objects.exists() and not Allocation.objects.exists()
    assert balance_of(user=alice) == Decimal("10.00")


@pytest.mark.parametrize(
    ("start", "end", "field", "words"),
    [
        (NOW - timedelta(hours=1), NOW + timedelta(hours=2), "start", "in the past"),
        (START, START + timedelta(minutes=30), "end", "at least 60 minutes"),
        (START + timedelta(seconds=5), END, "start", "whole minutes"),
        (NOW + timedelta(days=20), NOW + timedelta(days=20, hours=2), "start", "within 14 days"),
    ],
)
def test_bad_periods_are_refused_naming_the_field(
    alice, plan, image, node, start, end, field, words
):
    with pytest.raises(RentalError) as refused:
        book(alice, plan, image, start, end)
    assert refused.value.field == field and words in refused.value.message


@pytest.mark.parametrize(
    ("before_start", "refund"),
    [(timedelta(hours=48), Decimal("16.00")), (timedelta(hours=2), Decimal("8.00"))],
)
def test_cancelling_refunds_by_the_policy_and_frees_the_gpus(
    alice, bob, plan, image, node, before_start, refund
):
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    cancelled = rs.reservation_cancel(
        reservation=reservation, actor=alice, now=START - before_start
    )
    assert cancelled.status == ReservationStatus.CANCELLED and cancelled.refunded == refund
    assert balance_of(user=alice) == Decimal("84.00") + refund
    assert not Allocation.objects.filter(reservation=reservation).exists()
    assert book(bob, plan, image, now=START - before_start).status == "booked"
    # Cancelling twice refunds once.
    rs.reservation_cancel(reservation=reservation, actor=alice, now=START - before_start)
    assert LedgerEntry.objects.filter(kind="refund").count() == 1


def test_a_reservation_cannot_be_cancelled_once_started(alice, plan, image, node, sent):
    reservation = book(alice, plan, image)
    beat(node, START)
    rs.reservations_tick(now=START)
    with pytest.raises(InvalidTransition) as refused:
        rs.reservation_cancel(
            reservation=reservation, actor=alice, now=START + timedelta(minutes=1)
        )
    assert "only be cancelled before its start" in refused.value.message


def test_the_clock_launches_warns_and_stops_and_the_meter_charges_nothing(
    settings, alice, plan, image, node, sent, django_capture_on_commit_callbacks
):
    settings.RESERVATION_END_WARNING_MINUTES = 15
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    assert rs.reservations_tick(now=START - timedelta(minutes=1))["activated"] == 0

    beat(node, START)
    with django_capture_on_commit_callbacks(execute=True):
        assert rs.reservations_tick(now=START)["activated"] == 1
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.ACTIVE
    (instance,) = reservation.instances.all()
    assert instance.status == InstanceStatus.PENDING and instance.host == node
    assert instance.idle_stop_minutes == 0
    (command,) = [m for m in sent if m["task"] == "instance_start"]
    assert sorted(command["spec"]["gpu_indices"]) == [0, 1]
    assert [g.index for g in selectors.instance_gpus(instance)] == [0, 1]
    assert rs.reservations_tick(now=START)["activated"] == 0  # once

    lc.instance_report_running(
        instance_id=str(instance.pk), port=4000, container_id="c", now=START + timedelta(minutes=1)
    )
    beat(node, END)
    assert meter_run(now=START + timedelta(hours=2)) == 0
    assert not Charge.objects.exists()

    # A stop and a start within the period keep the reserved GPUs, at no charge.
    lc.instance_stop(instance=instance, actor=alice, now=START + timedelta(hours=1))
    lc.instance_report_stopped(instance_id=str(instance.pk), now=START + timedelta(hours=1))
    assert Allocation.objects.filter(reservation=reservation).count() == 2
    lc.instance_start(instance=instance, actor=alice, now=START + timedelta(hours=2))
    lc.instance_report_running(
        instance_id=str(instance.pk), port=4000, container_id="c", now=START + timedelta(hours=2)
    )

    assert rs.reservations_tick(now=END - timedelta(minutes=20))["warned"] == 0
    assert rs.reservations_tick(now=END - timedelta(minutes=14))["warned"] == 1
    notice = InstanceEvent.objects.get(instance=instance, kind="notice")
    assert notice.step == "reservation_ending" and "ends at 15:00 UTC" in notice.reason
    assert rs.reservations_tick(now=END - timedelta(minutes=10))["warned"] == 0  # once

    assert rs.reservations_tick(now=END)["completed"] == 1
    instance.refresh_from_db()
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.COMPLETED
    assert (
        instance.status == InstanceStatus.STOPPING and "reservation ended" in instance.status_reason
    )
    lc.instance_report_stopped(instance_id=str(instance.pk), now=END)
    with pytest.raises(InvalidTransition) as refused:
        lc.instance_start(instance=instance, actor=alice, now=END + timedelta(minutes=5))
    assert "book again" in refused.value.message
    assert meter_run(now=END + timedelta(hours=1)) == 0
    assert balance_of(user=alice) == Decimal("84.00")
    assert [e.to_status for e in reservation.events.all()] == ["booked", "active", "completed"]


def _active(alice, plan, image, node, *, ran_at=START):
    """An active reservation whose instance runs (from ``ran_at``)."""
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    beat(node, START)
    rs.reservations_tick(now=START)
    instance = reservation.instances.get()
    lc.instance_report_running(
        instance_id=str(instance.pk), port=4000, container_id="c", now=ran_at
    )
    return reservation, instance


def test_a_terminated_reserved_instance_can_be_launched_again_on_the_same_gpus(
    alice, plan, image, node, sent, django_capture_on_commit_callbacks
):
    reservation, first = _active(alice, plan, image, node)
    at = START + timedelta(hours=1)
    beat(node, at)
    with pytest.raises(InvalidTransition, match="is running: it holds the reserved GPUs"):
        rs.reservation_relaunch(reservation=reservation, actor=alice, now=at)

    lc.instance_terminate(instance=first, actor=alice, now=at)
    lc.instance_report_removed(instance_id=str(first.pk), now=at)
    assert Allocation.objects.filter(reservation=reservation).count() == 2  # still held
    with django_capture_on_commit_callbacks(execute=True):
        second = rs.reservation_relaunch(reservation=reservation, actor=alice, now=at)

    assert second.pk != first.pk and second.status == InstanceStatus.PENDING
    assert [g.index for g in selectors.instance_gpus(second)] == [0, 1]
    starts = [m for m in sent if m["task"] == "instance_start"]
    assert starts[-1]["spec"]["instance_id"] == str(second.pk)
    assert "launched again by alice" in reservation.events.last().reason
    assert balance_of(user=alice) == Decimal("84.00")  # paid once, at booking
    with pytest.raises(InvalidTransition, match="is pending"):
        rs.reservation_relaunch(reservation=reservation, actor=alice, now=at)

    # The end stops the new one; the reservation then cannot launch again.
    lc.instance_report_running(instance_id=str(second.pk), port=4001, container_id="d", now=at)
    beat(node, END)
    assert rs.reservations_tick(now=END)["completed"] == 1
    second.refresh_from_db()
    assert second.status == InstanceStatus.STOPPING
    with pytest.raises(InvalidTransition, match="only an active reservation"):
        rs.reservation_relaunch(reservation=reservation, actor=alice, now=END)


def test_a_stopped_reserved_instance_is_started_not_launched_again(alice, plan, image, node, sent):
    reservation, instance = _active(alice, plan, image, node)
    at = START + timedelta(hours=1)
    lc.instance_stop(instance=instance, actor=alice, now=at)
    lc.instance_report_stopped(instance_id=str(instance.pk), now=at)
    with pytest.raises(InvalidTransition, match="is stopped: start it instead"):
        rs.reservation_relaunch(reservation=reservation, actor=alice, now=at)


def test_a_relaunch_on_a_host_that_is_down_is_refused_and_can_be_tried_later(
    alice, plan, image, node, sent
):
    reservation, instance = _active(alice, plan, image, node)
    at = START + timedelta(hours=1)
    beat(node, at - timedelta(minutes=10))
    lc.instance_terminate(instance=instance, actor=alice, now=at - timedelta(minutes=10))
    lc.instance_report_removed(instance_id=str(instance.pk), now=at - timedelta(minutes=10))
    # silent for ten minutes
    with pytest.raises(RentalError, match="host node1 is not available now"):
        rs.reservation_relaunch(reservation=reservation, actor=alice, now=at)
    beat(node, at)
    assert rs.reservation_relaunch(reservation=reservation, actor=alice, now=at).pk


def test_a_relaunch_that_fails_refunds_only_what_is_left(alice, plan, image, node, sent):
    """The first instance ran for an hour, so a failed relaunch is no full refund."""
    reservation, instance = _active(alice, plan, image, node)
    at = START + timedelta(hours=1)
    beat(node, at)
    lc.instance_terminate(instance=instance, actor=alice, now=at)
    lc.instance_report_removed(instance_id=str(instance.pk), now=at)
    second = rs.reservation_relaunch(reservation=reservation, actor=alice, now=at)
    lc.instance_report_failed(instance_id=str(second.pk), reason="image missing", now=at)
    assert rs.reservations_tick(now=at + timedelta(seconds=30))["failed"] == 1
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.COMPLETED
    assert reservation.refunded == Decimal("12.80")  # 4 of the 5 paid hours at 3.20


def test_a_reservation_whose_instance_cannot_start_is_refunded_in_full(
    alice, plan, image, node, sent
):
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    beat(node, START)
    rs.reservations_tick(now=START)
    instance = reservation.instances.get()
    lc.instance_report_failed(instance_id=str(instance.pk), reason="image missing", now=START)
    assert rs.reservations_tick(now=START + timedelta(seconds=30))["failed"] == 1
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.CANCELLED
    assert reservation.refunded == reservation.price
    assert balance_of(user=alice) == Decimal("100.00")
    assert not Allocation.objects.filter(reservation=reservation).exists()


def test_a_booking_the_clock_never_launched_is_refunded_in_full_at_its_end(
    alice, plan, image, node
):
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    assert rs.reservations_tick(now=END + timedelta(minutes=1))["completed"] == 1
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.CANCELLED
    assert reservation.refunded == reservation.price and balance_of(user=alice) == 100
    assert "never launched" in reservation.events.last().reason


def test_a_host_that_is_down_at_the_start_costs_nothing(alice, plan, image, node, sent):
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)
    beat(node, START - timedelta(minutes=10))  # silent since
    assert rs.reservations_tick(now=START)["activated"] == 0
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.CANCELLED and not reservation.instances.exists()
    assert balance_of(user=alice) == Decimal("100.00")
    assert "node1 was not available" in reservation.events.last().reason
    assert not Allocation.objects.filter(reservation=reservation).exists()


def test_a_lost_host_refunds_the_unused_part_of_the_period(alice, plan, image, node, sent):
    credit_add(user=alice, amount=Decimal("100.00"))
    reservation = book(alice, plan, image)  # 16.00 for 5 h
    beat(node, START)
    rs.reservations_tick(now=START)
    instance = reservation.instances.get()
    lc.instance_report_running(instance_id=str(instance.pk), port=4000, container_id="c", now=START)
    went_down = START + timedelta(hours=2)
    Instance.objects.filter(pk=instance.pk).update(
        status=InstanceStatus.LOST, stopped_at=went_down, status_reason="host silent"
    )
    assert rs.reservations_tick(now=went_down + timedelta(minutes=1))["failed"] == 1
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.COMPLETED
    assert reservation.refunded == Decimal("9.60")  # 3 of 5 hours unused
    assert balance_of(user=alice) == Decimal("93.60")
    (held,) = {a.period.upper for a in Allocation.objects.filter(reservation=reservation)}
    assert held == went_down  # the GPUs are free again for the rest of the period


def test_back_to_back_bookings_end_the_first_before_launching_the_next(
    alice, bob, plan, image, node, sent
):
    first = book(alice, plan, image)
    second = book(bob, plan, image, END, END + timedelta(hours=2))
    beat(node, START)
    rs.reservations_tick(now=START)
    beat(node, END)
    done = rs.reservations_tick(now=END)
    assert (done["completed"], done["activated"]) == (1, 1)
    assert first.instances.get().status == InstanceStatus.STOPPING
    assert second.instances.get().status == InstanceStatus.PENDING


def test_bookings_count_against_the_gpu_quota(alice, plan, one, image, make_host, h100):
    make_host("node2", h100, count=8, last_heartbeat_at=NOW)
    type(alice).objects.filter(pk=alice.pk).update(gpu_quota=3)
    alice.refresh_from_db()
    book(alice, plan, image)
    with pytest.raises(QuotaExceeded) as refused:
        book(alice, plan, image, START + timedelta(hours=1), END)
    assert "your quota is 3 GPUs at once and you hold 2; 2 more" in refused.value.message
    book(alice, one, image, START + timedelta(hours=1), END)  # 3 in all: within the quota
    book(alice, plan, image, END, END + timedelta(hours=1))  # later: nothing overlaps


def test_availability_counts_free_gpus_per_hour_and_the_largest_block(
    alice, one, image, make_host, h100
):
    make_host("node1", h100, count=2, last_heartbeat_at=NOW)
    make_host("node2", h100, count=2, last_heartbeat_at=NOW)
    book(alice, one, image, START, START + timedelta(hours=2))
    total, hours = selectors.availability(gpu_model=h100, start=START - timedelta(hours=1), hours=4)
    assert total == 4
    assert [(h.free, h.largest_block) for h in hours] == [(4, 2), (3, 2), (3, 2), (4, 2)]


def test_the_month_invoice_has_a_line_per_reservation_less_refunds(
    settings, alice, plan, one, image, node
):
    settings.TIME_ZONE = "UTC"
    credit_add(user=alice, amount=Decimal("100.00"))
    kept = book(alice, plan, image)
    dropped = book(alice, one, image, END, END + timedelta(hours=2))
    rs.reservation_cancel(reservation=dropped, actor=alice, now=NOW + timedelta(hours=1))
    invoice = invoice_generate(user=alice, year=2026, month=6, now=NOW + timedelta(hours=2))
    (line,) = InvoiceLine.objects.filter(invoice=invoice)
    assert line.reservation_id == kept.pk and line.rate_kind == "reserved"
    assert line.amount == Decimal("16.00") and line.gpu_hours == Decimal("10.0000")
    assert invoice.total == Decimal("16.00")


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_many_simultaneous_bookings_never_book_more_gpus_than_exist(one, image, make_host, h100):
    make_host("node1", h100, count=4, last_heartbeat_at=NOW)
    users = [UserFactory(email=f"u{i}@example.com") for i in range(12)]
    barrier = threading.Barrier(len(users))
    booked, refused, errors = [], [], []

    def attempt(user):
        try:
            barrier.wait()
            booked.append(book(user, one, image))
        except NoCapacity:
            refused.append(user)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(u,)) for u in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(booked) == 4 and len(refused) == 8
    held = Allocation.objects.filter(reservation__isnull=False)
    assert held.count() == 4 and len({a.gpu_id for a in held}) == 4
    assert Reservation.objects.count() == 4  # the refused left nothing behind
    assert LedgerEntry.objects.filter(kind="reservation").count() == 4


def test_a_refund_after_the_invoice_is_issued_comes_as_a_credit_note(
    settings, alice, plan, image, node
):
    settings.TIME_ZONE = "UTC"
    credit_add(user=alice, amount=Decimal("100.00"))
    start = datetime(2026, 7, 5, 10, 0, tzinfo=UTC)
    booked_at = datetime(2026, 6, 25, tzinfo=UTC)
    reservation = book(alice, plan, image, start, start + timedelta(hours=5), now=booked_at)
    june = invoice_generate(user=alice, year=2026, month=6, now=datetime(2026, 7, 1, tzinfo=UTC))
    june = invoice_issue(invoice=june, now=datetime(2026, 7, 1, 1, tzinfo=UTC))
    assert june.total == Decimal("16.00")

    rs.reservation_cancel(
        reservation=reservation, actor=alice, now=datetime(2026, 7, 2, tzinfo=UTC)
    )
    june.refresh_from_db()
    assert june.total == Decimal("16.00")  # issued: unchanged
    (note,) = Invoice.objects.filter(kind=Invoice.Kind.CREDIT_NOTE, corrects=june)
    assert note.status == "issued" and note.number.startswith("CN-") and note.total == 16
    assert note.lines.get().reservation_id == reservation.pk
    assert balance_of(user=alice) == Decimal("100.00")  # refunded once, not twice


def test_a_draft_counts_every_refund_made_before_it_is_issued(settings, alice, plan, image, node):
    settings.TIME_ZONE = "UTC"
    credit_add(user=alice, amount=Decimal("100.00"))
    start = datetime(2026, 7, 5, 10, 0, tzinfo=UTC)
    reservation = book(
        alice, plan, image, start, start + timedelta(hours=5), now=datetime(2026, 6, 25, tzinfo=UTC)
    )
    rs.reservation_cancel(
        reservation=reservation, actor=alice, now=datetime(2026, 7, 2, tzinfo=UTC)
    )
    june = invoice_generate(user=alice, year=2026, month=6, now=datetime(2026, 7, 3, tzinfo=UTC))
    assert june.total == Decimal("0.00") and not june.lines.exists()
    assert not Invoice.objects.filter(kind=Invoice.Kind.CREDIT_NOTE).exists()
