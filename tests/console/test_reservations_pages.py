"""The reservations pages: availability, booking with a price preview, cancelling with the
refund, and nobody else's reservations."""

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.catalog.models import Plan
from gpurental.rentals.models import Reservation, ReservationStatus
from gpurental.rentals.services.reservations import (
    reservation_activate,
    reservation_book,
    reservation_price,
)

R = ReservationStatus


def whole_hour(hours_ahead: int) -> dt.datetime:
    """A whole UTC hour ``hours_ahead`` from now."""
    now = timezone.now().astimezone(dt.UTC)
    return now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=hours_ahead)


def cell_title(start: dt.datetime, free: int, together: int) -> str:
    return f"{start:%a %d %b %H:%M} UTC: free {free}, at most {together} on one host"


def field_html(page: str, name: str) -> str:
    """The label that holds one form field, its errors included."""
    return page.split(f'id="field-{name}"', 1)[1].split("</label>", 1)[0]


def form_data(model, image, start, hours=4, count=2, **extra):
    return {
        "gpu_model": model.slug,
        "gpu_count": count,
        "image": image.slug,
        "start": f"{start:%Y-%m-%dT%H:%M}",
        "hours": hours,
        **extra,
    }


@pytest.fixture
def node(a100, make_host):
    return make_host("node1", a100, count=8)


@pytest.fixture
def booked(alice, a100, image, node):
    """2× A100 for alice, 4 hours, starting in three days."""
    plan = Plan.objects.get(slug="a100-x2")
    start = whole_hour(72)
    return reservation_book(
        user=alice, image=image, start=start, end=start + dt.timedelta(hours=4), plan=plan
    )


def test_page_works_with_nothing_offered(client, alice):
    client.force_login(alice)
    page = client.get(reverse("reservations")).text
    assert "No GPUs are offered yet" in page and "No reservations yet" in page
    assert "Reservations" in client.get(reverse("dashboard")).text  # the nav link


def test_page_works_with_plans_but_no_gpus(client, alice, a100, image):
    client.force_login(alice)
    page = client.get(reverse("reservations")).text
    assert "No A100 80GB SXM GPUs are in the fleet yet" in page
    assert "All times on this page are UTC" in page
    assert "count as taken until they stop" in page
    assert "15 %" in page  # the plans' reserved discount


def test_refund_policy_comes_from_the_settings(client, alice, a100, settings):
    settings.RESERVATION_FULL_REFUND_HOURS = 48
    settings.RESERVATION_LATE_REFUND_PERCENT = 25
    client.force_login(alice)
    page = client.get(reverse("reservations")).text
    assert "Cancel 48 hours or more before the start" in page
    assert "25 % back" in page


def test_availability_shows_every_gpu_free_and_fewer_after_a_booking(
    client, alice, bob, a100, image, node
):
    start = whole_hour(30)
    client.force_login(alice)
    page = client.get(reverse("reservations"), {"model": a100.slug}).text
    assert cell_title(start, 8, 8) in page

    plan = Plan.objects.get(slug="a100-x2")
    reservation_book(
        user=bob, image=image, start=start, end=start + dt.timedelta(hours=2), plan=plan
    )
    page = client.get(reverse("reservations"), {"model": a100.slug}).text
    assert cell_title(start, 6, 6) in page
    assert cell_title(start + dt.timedelta(hours=1), 6, 6) in page
    assert cell_title(start + dt.timedelta(hours=2), 8, 8) in page
    assert "No reservations yet" in page  # bob's booking is not alice's


def test_quote_shows_the_price_and_books_nothing(client, alice, a100, image, node):
    start = whole_hour(50)
    plan = Plan.objects.get(slug="a100-x2")
    price = reservation_price(plan=plan, start=start, end=start + dt.timedelta(hours=4))
    client.force_login(alice)
    data = form_data(a100, image, start)

    page = client.post(reverse("reservations"), {**data, "quote": "1"}).text
    assert f"${price}" in page and "The table shows room for it" in page
    partial = client.post(reverse("reservation_quote"), data).text
    assert f"${price}" in partial and "<html" not in partial
    assert not Reservation.objects.exists()


def test_booking_through_the_form_holds_gpus_and_debits_the_ledger(
    client, alice, a100, image, node
):
    credit_add(user=alice, amount=Decimal("500.00"))
    start = whole_hour(50)
    plan = Plan.objects.get(slug="a100-x2")
    price = reservation_price(plan=plan, start=start, end=start + dt.timedelta(hours=4))
    client.force_login(alice)

    response = client.post(
        reverse("reservations") + f"?model={a100.slug}",
        {**form_data(a100, image, start), "book": "1"},
    )
    assert response.status_code == 302 and response["Location"] == reverse("reservations")
    reservation = Reservation.objects.get(user=alice)
    assert reservation.start == start and reservation.end == start + dt.timedelta(hours=4)
    assert reservation.plan == plan and reservation.price == price and price > 0
    entry = LedgerEntry.objects.get(user=alice, kind=LedgerEntry.Kind.RESERVATION)
    assert entry.amount == -price and entry.reservation == reservation
    assert balance_of(user=alice) == Decimal("500.00") - price

    page = client.get(response["Location"]).text
    assert "Booked 2× A100" in page
    assert f'href="{reverse("reservation", args=[reservation.pk])}"' in page
    assert f"refund ${price}" in page  # three days ahead: all of it back


def test_a_start_in_the_past_is_shown_next_to_the_start(client, alice, a100, image, node):
    client.force_login(alice)
    page = client.post(
        reverse("reservations"), {**form_data(a100, image, whole_hour(-3)), "book": "1"}
    ).text
    assert "is in the past" in field_html(page, "start")
    assert not Reservation.objects.exists()


def test_no_capacity_is_shown_next_to_the_gpu_count(client, alice, a100, image, make_host):
    make_host("small", a100, count=1)
    client.force_login(alice)
    page = client.post(
        reverse("reservations"), {**form_data(a100, image, whole_hour(30), count=2), "book": "1"}
    ).text
    assert "no 2× A100 free on one host" in field_html(page, "gpu_count")
    assert not Reservation.objects.exists()


def test_too_long_a_booking_is_shown_next_to_the_hours(client, alice, a100, image, node, settings):
    settings.RESERVATION_MAX_HOURS = 10
    client.force_login(alice)
    page = client.post(
        reverse("reservations"), {**form_data(a100, image, whole_hour(30), hours=11), "book": "1"}
    ).text
    assert "at most 10 hours" in field_html(page, "hours")


def test_not_enough_credit_is_shown_on_the_form(client, alice, a100, image, node, settings):
    settings.BILLING_ENFORCE_BALANCE = True
    client.force_login(alice)
    page = client.post(
        reverse("reservations"), {**form_data(a100, image, whole_hour(30)), "book": "1"}
    ).text
    assert "paid at booking" in field_html(page, "gpu_count")
    assert not Reservation.objects.exists()


def test_cancel_well_ahead_refunds_everything(client, alice, booked):
    client.force_login(alice)
    response = client.post(reverse("reservation_cancel", args=[booked.pk]), follow=True)
    assert f"refunded {booked.price} USD" in response.text
    booked.refresh_from_db()
    assert booked.status == R.CANCELLED and booked.refunded == booked.price
    refund = LedgerEntry.objects.get(kind=LedgerEntry.Kind.REFUND, reservation=booked)
    assert refund.amount == booked.price
    assert not booked.allocations.exists()


def test_cancel_late_refunds_the_late_percentage(client, alice, a100, image, node):
    plan = Plan.objects.get(slug="a100-x1")
    start = whole_hour(3)
    reservation = reservation_book(
        user=alice, image=image, start=start, end=start + dt.timedelta(hours=2), plan=plan
    )
    half = (reservation.price / 2).quantize(Decimal("0.01"))
    client.force_login(alice)
    assert f"refund ${half}" in client.get(reverse("reservations")).text
    client.post(reverse("reservation_cancel", args=[reservation.pk]))
    reservation.refresh_from_db()
    assert reservation.status == R.CANCELLED and reservation.refunded == half


def test_cancel_after_the_start_is_refused_with_the_reason(client, alice, a100, image, node, sent):
    plan = Plan.objects.get(slug="a100-x1")
    start = timezone.now().replace(second=0, microsecond=0)
    reservation = reservation_book(
        user=alice, image=image, start=start, end=start + dt.timedelta(hours=2), plan=plan
    )
    client.force_login(alice)
    page = client.get(reverse("reservations")).text
    assert reverse("reservation_cancel", args=[reservation.pk]) not in page
    response = client.post(reverse("reservation_cancel", args=[reservation.pk]), follow=True)
    assert "can only be cancelled before its start" in response.text
    reservation.refresh_from_db()
    assert reservation.status == R.BOOKED and reservation.refunded == 0


def test_detail_shows_the_gpus_the_history_and_the_instance_once_launched(
    client, alice, a100, image, node, sent
):
    plan = Plan.objects.get(slug="a100-x2")
    start = timezone.now().replace(second=0, microsecond=0)
    reservation = reservation_book(
        user=alice, image=image, start=start, end=start + dt.timedelta(hours=2), plan=plan
    )
    client.force_login(alice)
    url = reverse("reservation", args=[reservation.pk])
    page = client.get(url).text
    gpus = page.split('id="reservation-gpus"', 1)[1].split("</table>", 1)[0]
    assert len(re.findall(r"<td>node1</td><td>\d</td>", gpus)) == 2
    assert "booked on node1" in page and "launched at the start" in page

    instance = reservation_activate(reservation=reservation, now=timezone.now())
    instance_url = reverse("instance", args=[instance.pk])
    assert instance_url in client.get(url).text
    assert instance_url in client.get(reverse("reservations")).text
    assert "Active" in client.get(url).text


def test_another_customer_gets_404_and_cannot_cancel(client, bob, carol, booked):
    client.force_login(bob)
    assert client.get(reverse("reservation", args=[booked.pk])).status_code == 404
    assert client.post(reverse("reservation_cancel", args=[booked.pk])).status_code == 404
    booked.refresh_from_db()
    assert booked.status == R.BOOKED
    assert "No reservations yet" in client.get(reverse("reservations")).text
    client.force_login(carol)  # staff may open it, but the list is everyone's own
    assert client.get(reverse("reservation", args=[booked.pk])).status_code == 200
    assert "No reservations yet" in client.get(reverse("reservations")).text


def test_pages_need_a_login(client, booked):
    assert client.get(reverse("reservations")).status_code == 302
    assert client.get(reverse("reservation", args=[booked.pk])).status_code == 302
    assert client.post(reverse("reservation_cancel", args=[booked.pk])).status_code == 302


@pytest.mark.backend
def test_the_same_form_sent_twice_books_and_charges_once(client, alice, a100, image, node):
    client.force_login(alice)
    nonce = client.get(reverse("reservations")).text.split('name="nonce" value="', 1)[1][:22]
    data = {**form_data(a100, image, whole_hour(50)), "nonce": nonce, "book": "1"}
    assert client.post(reverse("reservations"), data).status_code == 302
    again = client.post(reverse("reservations"), data, follow=True)
    assert "sent twice" in again.text
    assert Reservation.objects.count() == 1
    assert LedgerEntry.objects.filter(kind=LedgerEntry.Kind.RESERVATION).count() == 1


def test_a_refused_booking_can_be_sent_again_once_fixed(client, alice, a100, image, make_host):
    make_host("node1", a100, count=1)
    client.force_login(alice)
    data = {**form_data(a100, image, whole_hour(50)), "nonce": "n-1", "book": "1"}
    page = client.post(reverse("reservations"), data).text  # 2 GPUs: no capacity
    assert "no 2× A100 free" in page
    assert client.post(reverse("reservations"), {**data, "gpu_count": 1}).status_code == 302
    assert Reservation.objects.count() == 1


def test_absurd_dates_are_refused_not_crashed(client, alice, carol, a100, image, node):
    client.force_login(alice)
    far = dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.UTC)
    for extra in ({"book": "1"}, {"quote": "1"}):
        page = client.post(reverse("reservations"), {**form_data(a100, image, far), **extra})
        assert page.status_code == 200 and "within 14 days" in field_html(page.text, "start")
    assert client.get(reverse("billing_invoices") + "?month=9999-12").status_code == 200
    assert client.get(reverse("billing_usage_csv") + "?month=9999-12").status_code == 400
    client.force_login(carol)  # staff: the revenue page
    for month in ("0000-01", "9999-12"):
        assert client.get(reverse("revenue") + f"?month={month}").status_code == 200
        assert client.get(reverse("revenue_csv") + f"?month={month}").status_code == 400


def test_a_terminated_reserved_instance_can_be_launched_again_from_its_page(
    client, alice, bob, a100, image, node, sent
):
    from gpurental.rentals.services import lifecycle as lc
    from gpurental.rentals.services.reservations import reservations_tick

    booked_at = timezone.now().replace(second=0, microsecond=0) - dt.timedelta(hours=1)
    reservation = reservation_book(
        user=alice,
        image=image,
        gpu_model=a100,
        gpu_count=2,
        start=booked_at + dt.timedelta(minutes=30),
        end=booked_at + dt.timedelta(hours=5),
        now=booked_at,
    )
    reservations_tick()
    (first,) = reservation.instances.all()
    page_url = reverse("reservation", args=[reservation.pk])
    relaunch_url = reverse("reservation_relaunch", args=[reservation.pk])
    client.force_login(alice)
    assert "Launch again" not in client.get(page_url).text  # its instance still holds them

    lc.instance_terminate(instance=first, actor=alice)
    lc.instance_report_removed(instance_id=str(first.pk))
    page = client.get(page_url).text
    assert 'id="relaunch"' in page and "GPUs stay yours until" in page
    client.force_login(bob)
    assert client.post(relaunch_url).status_code == 404

    client.force_login(alice)
    response = client.post(relaunch_url)
    second = reservation.instances.exclude(pk=first.pk).get()
    assert response.status_code == 302 and response.url == reverse("instance", args=[second.pk])
    page = client.post(relaunch_url, follow=True).text  # sent again: refused, said why
    assert f"instance {second.pk} of this reservation is pending" in page
    assert reservation.instances.count() == 2
