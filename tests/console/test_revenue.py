"""The staff revenue page: per day and per GPU model, from charges, reservations and
their refunds, in the operator's zone; staff only; a CSV of the per-day table."""

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from django.urls import reverse

from gpurental.billing.models import Charge, RateKind
from gpurental.catalog.models import Plan
from gpurental.rentals.services.reservations import reservation_book, reservation_cancel
from tests.factories import GPUModelFactory, InstanceFactory, PlanFactory

UTC = dt.UTC


def at(day, hour=0, minute=0, month=3):
    return dt.datetime(2025, month, day, hour, minute, tzinfo=UTC)


def charge(instance, start, minutes, amount, kind=RateKind.PEAK):
    return Charge.objects.create(
        instance=instance,
        user=instance.user,
        period_start=start,
        period_end=start + dt.timedelta(minutes=minutes),
        rate_kind=kind,
        gpu_count=instance.gpu_count,
        hourly_rate=Decimal("4.4"),
        amount=Decimal(amount),
    )


@pytest.fixture
def march(alice, bob, a100, image, make_host):
    """March 2025: on-demand charges on the 5th and 20th (and one in February), two
    reservations paid on the 10th, the second cancelled (refunded in full) on the 11th."""
    make_host("node1", a100, count=8)
    h100 = GPUModelFactory(slug="h100", name="H100 80GB SXM", short_name="H100")
    x2 = InstanceFactory(user=alice, plan=Plan.objects.get(slug="a100-x2"))
    h1 = InstanceFactory(user=bob, plan=PlanFactory(gpu_model=h100, gpu_count=1, slug="h100-x1"))
    charge(x2, at(5, 10), 60, "4.400000")
    charge(x2, at(5, 11), 30, "2.200000", RateKind.OFF_PEAK)
    charge(h1, at(20, 0), 20, "0.333333")
    charge(h1, at(28, 23, month=2), 60, "9.000000")  # February
    kept = reservation_book(
        user=alice,
        image=image,
        plan=Plan.objects.get(slug="a100-x2"),
        start=at(12, 10),
        end=at(12, 14),
        now=at(10, 12),
    )
    cancelled = reservation_book(
        user=bob,
        image=image,
        plan=Plan.objects.get(slug="a100-x1"),
        start=at(15, 10),
        end=at(15, 12),
        now=at(10, 13),
    )
    reservation_cancel(reservation=cancelled, actor=bob, now=at(11, 9))
    return kept, cancelled


def day_row(page, day):
    row = page.split(f'data-day="{day}"', 1)[1].split("</tr>", 1)[0]
    return [cell.split("<", 1)[0] for cell in row.split("<td>")[2:]]


def test_revenue_matches_the_charges_and_reservations(client, carol, march):
    kept, cancelled = march
    assert kept.price > 0 and cancelled.price > 0
    client.force_login(carol)
    page = client.get(reverse("revenue"), {"month": "2025-03"}).text

    # on demand, reserved, refunds, net, GPU-hours
    assert day_row(page, "2025-03-05") == ["6.60", "0.00", "0.00", "6.60", "3.0"]
    assert day_row(page, "2025-03-10") == [
        "0.00",
        f"{kept.price + cancelled.price}",
        "0.00",
        f"{kept.price + cancelled.price}",
        "8.0",  # the kept one: 2 GPUs × 4 hours; the cancelled one delivers nothing
    ]
    assert day_row(page, "2025-03-11") == ["0.00", "0.00", f"{cancelled.price}"] + [
        f"{-cancelled.price}",
        "0.0",
    ]
    assert day_row(page, "2025-03-20") == ["0.33", "0.00", "0.00", "0.33", "0.3"]
    assert "2025-02-28" not in page and "2025-04-01" not in page
    assert page.count("data-day=") == 31

    net = Decimal("6.933333") + kept.price
    assert f'id="total-net">${net.quantize(Decimal("0.01")):,}' in page
    models = page.split('id="revenue-models"', 1)[1].split("</table>", 1)[0]
    a100_row = models.split("<td>A100 80GB SXM</td>", 1)[1].split("</tr>", 1)[0]
    assert f"<td>{(Decimal('6.60') + kept.price):.2f}</td>" in a100_row
    assert "<td>H100 80GB SXM</td><td>0.33</td>" in models


def test_days_are_the_operators(client, carol, march, settings):
    settings.TIME_ZONE = "Europe/Berlin"  # UTC+1 in March (before the switch on the 30th)
    client.force_login(carol)
    page = client.get(reverse("revenue"), {"month": "2025-03"}).text
    # The February charge at 23:00 UTC is 1 March, 00:00 in Berlin.
    assert day_row(page, "2025-03-01")[0] == "9.00"


def test_empty_month_and_bad_month(client, carol):
    client.force_login(carol)
    page = client.get(reverse("revenue"), {"month": "2031-02"}).text
    assert "No revenue in 2031-02" in page and page.count("data-day=") == 28
    assert 'id="total-net">$0.00' in page
    page = client.get(reverse("revenue"), {"month": "2031-13"}).text
    assert "Use YYYY-MM" in page
    assert client.get(reverse("revenue_csv"), {"month": "nope"}).status_code == 400


def test_default_month_is_this_one(client, carol):
    client.force_login(carol)
    assert client.get(reverse("revenue")).status_code == 200
    assert "Revenue" in client.get(reverse("fleet")).text  # the staff nav link


def test_csv_is_the_per_day_table(client, carol, march):
    kept, cancelled = march
    client.force_login(carol)
    response = client.get(reverse("revenue_csv"), {"month": "2025-03"})
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="revenue-2025-03.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 32  # 31 days and the total
    by_day = {row["day"]: row for row in rows}
    assert by_day["2025-03-05"]["on_demand"] == "6.60"
    assert by_day["2025-03-05"]["gpu_hours"] == "3.0"
    assert by_day["2025-03-11"]["refunds"] == f"{cancelled.price}"
    assert by_day["total"]["net"] == f"{(Decimal('6.933333') + kept.price):.2f}"
    assert by_day["total"]["currency"] == "USD"


def test_customers_cannot_see_revenue(client, alice):
    client.force_login(alice)
    assert client.get(reverse("revenue")).status_code == 302
    assert client.get(reverse("revenue_csv")).status_code == 302
    assert "Revenue" not in client.get(reverse("dashboard")).text
