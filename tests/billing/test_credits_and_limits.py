"""Credit, the prepaid check on launch and start, and stopping what the balance no longer covers."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from gpurental.accounts.models import AuditEvent
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import balance_of, balance_status
from gpurental.billing.services import credit_add
from gpurental.billing.services.limits import limits_enforce
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from tests.billing.conftest import beat
from tests.factories import UserFactory

T0 = datetime(2026, 6, 10, 10, tzinfo=UTC)


def test_a_launch_the_balance_cannot_pay_for_ten_minutes_is_refused(
    alice, plan, image, make_host, sent
):
    make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("0.50"))
    with pytest.raises(InsufficientBalance) as refused:
        lc.instance_launch(user=alice, image=image, plan=plan)
    # 10 minutes of 4.00/h = 0.6667, rounded up; 0.17 short.
    assert refused.value.message == (
        "your balance is 0.50 USD; plan h100-x2 costs 4.00 USD/h, and a launch needs "
        "10 minutes paid ahead (0.67 USD). Add at least 0.17 USD of credit."
    )
    assert refused.value.field == "plan" and refused.value.code == "insufficient_balance"
    assert isinstance(refused.value, RentalError)  # the API and console answer it as such
    assert not Instance.objects.exists() and not Allocation.objects.exists()
    assert sent == []


def test_enough_credit_or_a_credit_limit_lets_the_launch_go(
    alice, bob, plan, image, make_host, sent
):
    make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("0.67"))
    assert lc.instance_launch(user=alice, image=image, plan=plan).status == InstanceStatus.PENDING
    bob.credit_limit = Decimal("50.00")
    bob.save()
    assert lc.instance_launch(user=bob, image=image, plan=plan).status == InstanceStatus.PENDING


def test_what_already_runs_counts_against_the_balance(alice, plan, image, make_host, sent):
    make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("1.00"))
    lc.instance_launch(user=alice, image=image, plan=plan)
    with pytest.raises(
        InsufficientBalance, match="besides the 4.00 USD/h you run already"
    ) as refused:
        lc.instance_launch(user=alice, image=image, plan=plan)
    assert "Add at least 0.34 USD" in refused.value.message  # (4 + 4) × 10 / 60 = 1.3333


def test_the_check_can_be_switched_off(alice, plan, image, make_host, sent, settings):
    settings.BILLING_ENFORCE_BALANCE = False
    make_host("node1", plan.gpu_model)
    assert lc.instance_launch(user=alice, image=image, plan=plan).status == InstanceStatus.PENDING


def test_the_minimum_period_is_a_setting(alice, plan, image, make_host, sent, settings):
    settings.BILLING_MIN_PREPAID_MINUTES = 60
    make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("3.99"))
    with pytest.raises(InsufficientBalance, match=r"60 minutes paid ahead \(4.00 USD\)"):
        lc.instance_launch(user=alice, image=image, plan=plan)


def test_starting_again_needs_the_balance_too(
    alice, plan, make_host, run_instance, stop_instance, sent
):
    host = make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("2.00"))
    instance = run_instance(alice, plan, host, T0)
    stop_instance(instance, T0 + timedelta(minutes=25))  # 1.67 of the 2.00
    beat(host, T0 + timedelta(minutes=26))
    with pytest.raises(InsufficientBalance, match="your balance is 0.33 USD"):
        lc.instance_start(instance=instance, now=T0 + timedelta(minutes=26))
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.STOPPED


def test_customers_past_their_limit_are_stopped_with_the_reason(
    alice, bob, plan, make_host, run_instance, sent
):
    host = make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("1.00"))
    credit_add(user=bob, amount=Decimal("100.00"))
    mine = run_instance(alice, plan, host, T0)
    theirs = run_instance(bob, plan, host, T0)
    now = T0 + timedelta(minutes=14)  # alice: 0.93 used, still 0.07 left
    beat(host, now)
    meter_run(now=now)
    assert limits_enforce(now=now) == []
    now = T0 + timedelta(minutes=16)  # 1.07 used: −0.07
    beat(host, now)
    meter_run(now=now)
    assert [i.pk for i in limits_enforce(now=now)] == [mine.pk]
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.status == InstanceStatus.STOPPING  # the agent is told; /workspace is kept
    assert mine.stopped_at == now
    event = mine.events.get(to_status=InstanceStatus.STOPPING)
    assert event.reason.startswith(
        "stopped because your balance is -0.07 USD and your credit limit is 0.00 USD"
    )
    assert "Add credit, then start it again" in event.reason
    assert theirs.status == InstanceStatus.RUNNING
    assert AuditEvent.objects.filter(
        action="billing.stop_over_limit", object_id=str(mine.pk)
    ).exists()
    assert limits_enforce(now=now) == []  # stopping is not active: nothing more to do


def test_a_credit_limit_lets_the_balance_go_that_far_below_zero(
    alice, plan, make_host, run_instance, sent
):
    host = make_host("node1", plan.gpu_model)
    alice.credit_limit = Decimal("10.00")
    alice.save()
    instance = run_instance(alice, plan, host, T0)
    now = T0 + timedelta(hours=2)  # −8.00
    beat(host, now)
    meter_run(now=now)
    assert limits_enforce(now=now) == []
    now = T0 + timedelta(hours=3)  # −12.00
    beat(host, now)
    meter_run(now=now)
    assert [i.pk for i in limits_enforce(now=now)] == [instance.pk]


def test_low_balance_warning(alice, plan, make_host, run_instance, settings):
    settings.BILLING_LOW_BALANCE_HOURS = 24
    host = make_host("node1", plan.gpu_model)
    assert balance_status(user=alice).low  # nothing to spend
    credit_add(user=alice, amount=Decimal("200.00"))
    assert not balance_status(user=alice).low  # nothing runs
    run_instance(alice, plan, host, T0)
    status = balance_status(user=alice)
    assert (status.hourly_burn, status.hours_left, status.low) == (4, 50, False)  # 200 / 4.00
    LedgerEntry.objects.create(user=alice, kind="adjustment", amount=Decimal("-120.00"))
    status = balance_status(user=alice)
    assert (status.hours_left, status.low) == (20, True)  # 80 / 4.00 < 24


def test_staff_add_credit_from_the_users_list_and_it_is_audited(client, carol, alice, bob):
    client.force_login(carol)
    url = reverse("admin:accounts_user_changelist")
    picked = {"action": "add_credit", "_selected_action": [alice.pk, bob.pk]}
    form = client.post(url, picked)
    assert form.status_code == 200 and 'name="amount"' in form.text
    refused = client.post(url, {**picked, "apply": "1", "amount": "0"})
    assert refused.status_code == 200 and LedgerEntry.objects.count() == 0
    done = client.post(url, {**picked, "apply": "1", "amount": "25.50", "description": "welcome"})
    assert done.status_code == 302
    assert balance_of(user=alice) == balance_of(user=bob) == Decimal("25.50")
    entry = LedgerEntry.objects.get(user=alice)
    assert (entry.kind, entry.description, entry.created_by) == ("credit", "welcome", carol)
    audits = AuditEvent.objects.filter(action="credit.add", actor=carol)
    assert sorted(audits.values_list("object_id", flat=True)) == sorted(
        [str(alice.pk), str(bob.pk)]
    )


def test_staff_without_the_ledger_permission_cannot_add_credit(client, alice):
    clerk = UserFactory(is_staff=True)
    client.force_login(clerk)
    clerk.user_permissions.add(Permission.objects.get(codename="view_user"))
    page = client.post(
        reverse("admin:accounts_user_changelist"),
        {"action": "add_credit", "_selected_action": [alice.pk], "apply": "1", "amount": "5"},
    )
    assert page.status_code in (200, 302)
    assert not LedgerEntry.objects.exists()
