"""The dashboard and the instance page show what billing computes, not an estimate of their own."""

from datetime import timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from gpurental.billing.models import Charge
from gpurental.billing.selectors import month_spend
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services import reservations as rs


def test_the_dashboard_shows_this_months_spend_from_the_meter(
    client, alice, a100, image, make_host, sent, settings
):
    settings.TIME_ZONE = "UTC"
    now = timezone.now()
    started = max(now - timedelta(minutes=30), now.replace(day=1, hour=0, minute=0, second=0))
    make_host("node1", a100, count=2)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1, now=started)
    lc.instance_report_running(
        instance_id=str(instance.pk), port=4000, container_id="c", now=started
    )
    meter_run(now=now)
    charged = sum(c.amount for c in Charge.objects.filter(instance=instance))
    client.force_login(alice)
    spend = month_spend(user=alice, now=timezone.now())
    page = client.get(reverse("dashboard")).text
    card = page[page.index('id="spend"') :][:400]
    assert spend.total >= round(charged, 2) > 0
    # The page was rendered a moment after ``spend``: at most a few cents of running time apart.
    shown = Decimal(card.split('class="big">$')[1].split("<")[0].replace(",", ""))
    assert abs(shown - spend.total) <= Decimal("0.05")
    assert "forecast" in card

    detail = client.get(reverse("instance", args=[instance.pk])).text
    cost = Decimal(detail[detail.index('id="cost"') :].split(">$")[1].split(" ")[0])
    assert abs(cost - spend.total) <= Decimal("0.05")


def test_a_reserved_instance_says_it_was_paid_at_booking(
    client, alice, a100, image, make_host, sent
):
    make_host("node1", a100, count=2)
    now = timezone.now().replace(second=0, microsecond=0)
    plan = a100.plans.get(gpu_count=1)
    reservation = rs.reservation_book(
        user=alice, plan=plan, image=image, start=now, end=now + timedelta(hours=1), now=now
    )
    (instance,) = [rs.reservation_activate(reservation=reservation, now=now)]
    client.force_login(alice)
    page = client.get(reverse("instance", args=[instance.pk])).text
    assert "paid at booking" in page and str(reservation.pk)[:8] in page


def test_the_idle_policy_is_set_from_the_instance_page(
    client, alice, bob, a100, image, make_host, sent
):
    make_host("node1", a100, count=2)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    url = reverse("instance_idle_policy", args=[instance.pk])
    client.force_login(alice)
    assert 'name="idle_stop_minutes"' in client.get(reverse("instance", args=[instance.pk])).text

    page = client.post(url, {"idle_stop_minutes": "0"}, follow=True).text
    assert "Idle auto-stop is off." in page
    instance.refresh_from_db()
    assert instance.idle_stop_minutes == 0
    assert instance.events.filter(kind="notice", step="idle_policy").exists()

    page = client.post(url, {"idle_stop_minutes": "3"}, follow=True).text
    assert "not 0 (off) or 10–10080 minutes" in page
    page = client.post(url, {"idle_stop_minutes": "lots"}, follow=True).text
    assert "not a whole number of minutes" in page
    instance.refresh_from_db()
    assert instance.idle_stop_minutes == 0

    client.force_login(bob)
    assert client.post(url, {"idle_stop_minutes": "60"}).status_code == 404
