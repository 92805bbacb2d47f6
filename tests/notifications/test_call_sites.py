"""The events fire from where things happen: the lifecycle, billing, the reservation clock."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from gpurental.billing.models import Invoice, LedgerEntry
from gpurental.billing.services.invoicing import invoice_issue
from gpurental.billing.services.limits import limits_enforce
from gpurental.notifications.checks import low_balance_check
from gpurental.notifications.models import Notification
from gpurental.rentals.models import Reservation
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reservations import reservations_tick
from tests.factories import period


def _running(user, image, a100, host, now):
    instance = lc.instance_launch(user=user, image=image, gpu_model=a100, gpu_count=1, now=now)
    lc.instance_report_running(
        instance_id=str(instance.pk), port=40000, container_id="c0ffee", now=now
    )
    instance.refresh_from_db()
    return instance


def _events(user):
    return sorted(Notification.objects.filter(user=user).values_list("event", "channel"))


def test_a_failed_launch_tells_the_customer(alice, image, a100, make_host, sent, fire):
    make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    fire(lc.instance_report_failed, instance_id=str(instance.pk), reason="image not found")
    assert _events(alice) == [("instance_failed", "email")]
    assert "image not found" in mail.outbox[0].body


def test_a_silent_host_makes_the_instance_unreachable_then_lost_and_says_so(
    alice, image, a100, make_host, sent, fire, endpoint, receiver
):
    make_host("node1", a100)
    now = timezone.now()
    instance = _running(alice, image, a100, None, now)
    fire(lc.instance_mark_unreachable, instance=instance, last_beat=now, now=now)
    fire(lc.instance_mark_lost, instance=instance, last_beat=now, now=now + timedelta(hours=1))
    assert [e["type"] for e in receiver.events()] == ["instance_unreachable", "instance_lost"]
    assert receiver.events()[1]["data"]["instance"]["status"] == "lost"
    assert [m.subject.split()[-1] for m in mail.outbox] == ["unreachable", "lost"]


def test_a_rolled_back_transition_tells_nobody(alice, image, a100, make_host, sent, fire):
    from django.db import transaction

    make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)

    def failing():
        with transaction.atomic():
            lc.instance_report_failed(instance_id=str(instance.pk), reason="x")
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        fire(failing)
    assert mail.outbox == []


def test_low_balance_is_warned_once_per_top_up_and_spend_stopped_at_zero(
    alice, image, a100, make_host, sent, fire
):
    make_host("node1", a100)
    LedgerEntry.objects.create(user=alice, kind="credit", amount=Decimal("1.00"))
    _running(alice, image, a100, None, timezone.now())
    fire(low_balance_check, now=timezone.now())
    fire(low_balance_check, now=timezone.now())
    assert _events(alice) == [("low_balance", "email")]
    LedgerEntry.objects.create(user=alice, kind="usage", amount=Decimal("-5.00"))
    fire(limits_enforce)
    assert _events(alice) == [("low_balance", "email"), ("spend_stopped", "email")]
    assert "-4.00" in mail.outbox[-1].subject


def test_issuing_an_invoice_tells_the_customer(alice, fire):
    draft = Invoice.objects.create(
        user=alice, period_start=date(2026, 10, 1), period_end=date(2026, 11, 1)
    )
    fire(invoice_issue, invoice=draft)
    assert _events(alice) == [("invoice_issued", "email")]
    assert f"/billing/invoices/{draft.pk}.pdf" in mail.outbox[0].body


def test_the_reservation_clock_reminds_once_before_the_start(alice, image, a100, fire, settings):
    plan = a100.plans.get(gpu_count=1)
    now = timezone.now()
    Reservation.objects.create(
        user=alice,
        plan=plan,
        gpu_model=a100,
        gpu_count=1,
        image=image,
        period=period(now + timedelta(minutes=10), 1),
        price=Decimal("1.00"),
    )
    assert fire(reservations_tick, now=now)["reminded"] == 1
    assert fire(reservations_tick, now=now + timedelta(minutes=1))["reminded"] == 0
    assert _events(alice) == [("reservation_starting_soon", "email")]
