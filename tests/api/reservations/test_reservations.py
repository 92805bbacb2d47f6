"""Reservations over the API: quote, book, read, cancel, launch again; availability per hour."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.rentals.models import Reservation, ReservationStatus
from gpurental.rentals.services.reservations import reservation_book, reservations_tick
from tests.api.conftest import assert_error

URL = "/api/v1/reservations/"
QUOTE = f"{URL}quote/"
AVAILABILITY = "/api/v1/availability/"
# The a100 fixture's plans cost 2.20/h for the whole plan; 15 % off reserved: 1.87/h.
FOUR_HOURS_RESERVED = Decimal("7.48")


def hour(days: float = 0, hours: float = 0):
    """A whole hour this far ahead of now."""
    moment = timezone.now() + timedelta(days=days, hours=hours)
    return moment.replace(minute=0, second=0, microsecond=0)


def body(start, hours: float = 4, **fields) -> dict:
    """2× A100 for ``hours`` from ``start``; a field set to None is left out."""
    data = {
        "gpu_model": "A100",
        "gpu_count": 2,
        "image": "jupyter-cpu",
        "start": start.isoformat(),
        "end": (start + timedelta(hours=hours)).isoformat(),
        **fields,
    }
    return {k: v for k, v in data.items() if v is not None}


def started_reservation(user, gpu_model, image) -> Reservation:
    """1 GPU booked an hour ago from half an hour ago, its instance launched by the clock."""
    booked_at = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    reservation = reservation_book(
        user=user,
        image=image,
        gpu_model=gpu_model,
        gpu_count=1,
        start=booked_at + timedelta(minutes=30),
        end=booked_at + timedelta(hours=5),
        now=booked_at,
    )
    reservations_tick()
    return reservation


@pytest.fixture
def book(as_alice, node, image):
    def post(start, client=as_alice, **fields):
        return client.post(URL, body(start, **fields))

    return post


# --- booking --------------------------------------------------------------------


def test_booking_holds_gpus_and_charges_the_reserved_price(book, alice, settings):
    settings.BILLING_CURRENCY = "USD"
    start = hour(days=2)
    response = book(start)

    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["status"] == "booked" and data["gpu_model"] == "a100-80gb-sxm"
    assert data["gpu_count"] == 2 and data["plan"] == "a100-x2" and data["image"] == "jupyter-cpu"
    assert data["price"] == "7.48" and data["refunded"] == "0.00" and data["currency"] == "USD"
    assert data["host"] == "node1" and data["gpu_indices"] == [0, 1]
    assert data["instance"] is None and data["cancelled_at"] is None
    assert data["refund_if_cancelled_now"] == "7.48"  # more than a day ahead: all of it
    assert data["start"].startswith(start.strftime("%Y-%m-%dT%H:00:00"))
    assert [e["to_status"] for e in data["events"]] == ["booked"]
    assert "node1" in data["events"][0]["reason"]
    assert balance_of(user=alice) == -FOUR_HOURS_RESERVED
    assert Reservation.objects.get(pk=data["id"]).user == alice


def test_booking_by_plan_with_an_offset(book):
    start = hour(days=3)
    local = start.astimezone(timezone.get_fixed_timezone(120))  # the same instant, +02:00
    response = book(local, gpu_model=None, gpu_count=None, plan="a100-x1")
    data = response.json()
    assert response.status_code == 201, data
    assert data["gpu_count"] == 1 and data["plan"] == "a100-x1"
    assert Reservation.objects.get(pk=data["id"]).start == start


def test_quote_prices_without_booking(as_alice, node, settings):
    start = hour(days=2)
    params = {k: v for k, v in body(start).items() if k != "image"}
    response = as_alice.get(QUOTE, params)

    assert response.status_code == 200, response.json()
    quote = response.json()
    assert quote["price"] == "7.48" and quote["rate_kind"] == "reserved"
    assert quote["hours"] == "4.0000" and quote["gpu_hours"] == "8.0000"
    assert quote["discount"] == "0.1500" and quote["hourly_rate"] == "1.8700"
    assert quote["plan"] == "a100-x2" and quote["gpu_count"] == 2
    assert quote["late_refund_percent"] == settings.RESERVATION_LATE_REFUND_PERCENT
    assert not Reservation.objects.exists()


def test_quote_checks_the_period_as_booking_does(as_alice, node):
    params = {k: v for k, v in body(hour(hours=-3)).items() if k != "image"}
    assert_error(as_alice.get(QUOTE, params), 400, "invalid", field="start")


def test_start_in_the_past_is_refused_naming_start(book):
    error = assert_error(book(hour(hours=-2)), 400, "invalid", field="start")
    assert "in the past" in error["message"]
    assert not Reservation.objects.exists()


def test_too_short_a_reservation_is_refused_naming_end(book):
    error = assert_error(book(hour(days=1), hours=0.5), 400, "invalid", field="end")
    assert "at least 60 minutes" in error["message"]


def test_a_time_without_a_zone_is_refused(as_alice, node, image):
    start = hour(days=1)
    data = body(start)
    data["start"] = start.replace(tzinfo=None).isoformat()
    error = assert_error(as_alice.post(URL, data), 400, "invalid", field="start")
    assert "time zone" in error["message"]


def test_a_time_out_of_range_is_refused(as_alice, node, image):
    data = body(hour(days=1))
    data["start"] = "0001-01-01T00:03:00+01:01"  # the year 0 in UTC
    assert_error(as_alice.post(URL, data), 400, "invalid", field="start")


def test_no_capacity_when_both_hosts_are_full(as_alice, a100, image, make_host):
    make_host("small1", a100, count=2)
    make_host("small2", a100, count=2)
    start = hour(days=1)
    assert as_alice.post(URL, body(start)).status_code == 201
    assert as_alice.post(URL, body(start + timedelta(hours=2))).status_code == 201

    response = as_alice.post(URL, body(start + timedelta(hours=1)))
    error = assert_error(response, 409, "no_capacity", field="gpu_count")
    assert "at most 0 together" in error["message"]
    assert Reservation.objects.count() == 2
    # After the first booking ends, its host is free again.
    assert as_alice.post(URL, body(start + timedelta(hours=4))).status_code == 201


def test_a_booking_the_balance_cannot_pay_is_refused(book, alice, settings):
    settings.BILLING_ENFORCE_BALANCE = True
    credit_add(user=alice, amount=Decimal("5.00"))
    error = assert_error(book(hour(days=1)), 400, "insufficient_balance", field="plan")
    assert "7.48" in error["message"]
    assert not Reservation.objects.exists() and balance_of(user=alice) == Decimal("5.00")

    credit_add(user=alice, amount=Decimal("5.00"))
    assert book(hour(days=1)).status_code == 201
    assert balance_of(user=alice) == Decimal("10.00") - FOUR_HOURS_RESERVED


def test_a_retried_booking_books_once(as_alice, node, image):
    data = body(hour(days=1))
    first = as_alice.post(URL, data, HTTP_IDEMPOTENCY_KEY="book-1")
    again = as_alice.post(URL, data, HTTP_IDEMPOTENCY_KEY="book-1")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Reservation.objects.count() == 1


# --- reading and visibility -----------------------------------------------------


def test_bob_cannot_see_or_cancel_alices_reservation(book, as_bob, as_carol):
    reservation_id = book(hour(days=2)).json()["id"]

    assert as_bob.get(URL).json()["results"] == []
    error = assert_error(as_bob.get(f"{URL}{reservation_id}/"), 404, "not_found")
    assert error["message"] == f"there is no reservation {reservation_id}"
    assert_error(as_bob.post(f"{URL}{reservation_id}/cancel/"), 404, "not_found")
    assert Reservation.objects.get(pk=reservation_id).status == ReservationStatus.BOOKED
    # Staff see every reservation, as they see every instance.
    assert [r["id"] for r in as_carol.get(URL).json()["results"]] == [reservation_id]


def test_list_and_detail(book, as_alice):
    first = book(hour(days=1)).json()
    second = book(hour(days=2)).json()
    listed = as_alice.get(URL).json()["results"]
    assert [r["id"] for r in listed] == [second["id"], first["id"]]  # newest first
    assert as_alice.get(f"{URL}{first['id']}/").json() == first


def test_the_instance_launched_at_the_start_is_shown(as_alice, alice, a100, image, node, sent):
    reservation = started_reservation(alice, a100, image)

    data = as_alice.get(f"{URL}{reservation.pk}/").json()
    assert data["status"] == "active" and data["instance"] is not None
    assert data["refund_if_cancelled_now"] is None
    assert data["gpu_indices"] == [0]
    error = assert_error(as_alice.post(f"{URL}{reservation.pk}/cancel/"), 409, "invalid_state")
    assert "only be cancelled before its start" in error["message"]


def test_a_terminated_reserved_instance_is_launched_again_once(
    as_alice, as_bob, alice, a100, image, node, sent
):
    from gpurental.rentals.services import lifecycle as lc

    reservation = started_reservation(alice, a100, image)
    (first,) = reservation.instances.all()
    relaunch = f"{URL}{reservation.pk}/relaunch/"
    error = assert_error(as_alice.post(relaunch), 409, "invalid_state")
    assert f"instance {first.pk} of this reservation is pending" in error["message"]

    lc.instance_terminate(instance=first, actor=alice)
    lc.instance_report_removed(instance_id=str(first.pk))
    assert_error(as_bob.post(relaunch), 404, "not_found")
    key = {"HTTP_IDEMPOTENCY_KEY": "relaunch-1"}
    response = as_alice.post(relaunch, **key)
    assert response.status_code == 201, response.json()
    again = as_alice.post(relaunch, **key)  # a retry: the same answer, no second instance
    assert again.status_code == 201 and again.json()["id"] == response.json()["id"]
    data = response.json()
    assert data["status"] == "pending" and data["gpu_indices"] == [0]
    assert "launched again" in data["events"][0]["reason"]
    assert reservation.instances.count() == 2
    assert as_alice.get(f"{URL}{reservation.pk}/").json()["instance"] == data["id"]


# --- cancelling -------------------------------------------------------------------


def test_cancel_a_day_ahead_refunds_in_full_and_frees_the_gpus(book, as_alice, alice):
    reservation_id = book(hour(days=3)).json()["id"]
    response = as_alice.post(f"{URL}{reservation_id}/cancel/")

    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["status"] == "cancelled" and data["refunded"] == "7.48"
    assert data["cancelled_at"] is not None and data["refund_if_cancelled_now"] is None
    assert data["host"] is None and data["gpu_indices"] == []
    assert [e["to_status"] for e in data["events"]] == ["booked", "cancelled"]
    assert balance_of(user=alice) == 0
    # Cancelling again changes nothing.
    again = as_alice.post(f"{URL}{reservation_id}/cancel/")
    assert again.status_code == 200 and again.json()["refunded"] == "7.48"
    assert balance_of(user=alice) == 0


def test_cancel_late_refunds_the_late_percent(book, as_alice, alice, settings):
    settings.RESERVATION_LATE_REFUND_PERCENT = 25
    reservation_id = book(hour(hours=3)).json()["id"]
    before = as_alice.get(f"{URL}{reservation_id}/").json()
    assert before["refund_if_cancelled_now"] == "1.87"

    data = as_alice.post(f"{URL}{reservation_id}/cancel/").json()
    assert data["status"] == "cancelled" and data["refunded"] == "1.87"
    assert balance_of(user=alice) == Decimal("1.87") - FOUR_HOURS_RESERVED


# --- availability -------------------------------------------------------------------


def test_availability_reflects_a_booking(book, as_alice):
    start = hour(days=1)
    book(start)
    params = {"gpu_model": "a100", "start": (start - timedelta(hours=1)).isoformat(), "hours": 6}
    response = as_alice.get(AVAILABILITY, params)

    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["hours"] == 6
    [model] = data["models"]
    assert model["gpu_model"] == "a100-80gb-sxm" and model["total"] == 8
    assert [h["free"] for h in model["hours"]] == [8, 6, 6, 6, 6, 8]
    assert [h["largest_block"] for h in model["hours"]] == [8, 6, 6, 6, 6, 8]
    assert len({h["start"] for h in model["hours"]}) == 6


def test_availability_defaults_to_every_model_over_the_horizon(as_alice, node, settings):
    settings.RESERVATION_HORIZON_DAYS = 2
    data = as_alice.get(AVAILABILITY).json()
    [model] = data["models"]
    assert data["hours"] == 48 and len(model["hours"]) == 48
    assert model["hours"][0]["start"] == data["start"]
    assert data["start"].startswith(hour().strftime("%Y-%m-%dT%H:00:00"))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"hours": 0}, "hours"),
        ({"hours": 14 * 24 + 1}, "hours"),
        ({"hours": "many"}, "hours"),
        ({"gpu_model": "Z80"}, "gpu_model"),
        ({"start": "2020-01-01T00:00Z"}, "start"),
        ({"start": "2099-01-01T00:00Z"}, "start"),
        ({"start": "tomorrow"}, "start"),
    ],
)
def test_availability_bad_params_name_the_field(as_alice, node, params, field):
    assert_error(as_alice.get(AVAILABILITY, params), 400, "invalid", field=field)
