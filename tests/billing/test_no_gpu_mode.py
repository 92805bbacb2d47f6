"""No-GPU mode: a stopped instance started on its own host without its GPUs (to reach its
data while they are taken), billed at the plan's no-GPU rate, then started with GPUs again."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError

from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import Charge, LedgerEntry
from gpurental.billing.selectors import hourly_burn_of
from gpurental.billing.services import credit_add
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.exceptions import InvalidTransition, NoCapacity
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from tests.billing.conftest import beat
from tests.factories import GroupFactory, InstanceFactory

T0 = datetime(2026, 6, 10, 10, tzinfo=UTC)  # peak time
S = InstanceStatus


def held(instance) -> int:
    return Allocation.objects.filter(instance=instance, period__upper_inf=True).count()


@pytest.fixture
def no_gpu_plan(plan):
    plan.no_gpu_hourly_rate = Decimal("0.1200")
    plan.save()
    return plan


@pytest.fixture
def taken(alice, bob, no_gpu_plan, make_host, run_instance, stop_instance):
    """Alice's stopped instance on node1, whose only two GPUs bob runs on now."""
    host = make_host("node1", no_gpu_plan.gpu_model, count=2)
    credit_add(user=alice, amount=Decimal("10.00"))
    credit_add(user=bob, amount=Decimal("10.00"))
    mine = run_instance(alice, no_gpu_plan, host, T0)
    stop_instance(mine, T0 + timedelta(minutes=30))
    theirs = run_instance(bob, no_gpu_plan, host, T0 + timedelta(minutes=31))
    return mine, theirs


def test_it_starts_without_gpus_while_they_are_taken_and_pays_the_no_gpu_rate(
    taken, sent, django_capture_on_commit_callbacks
):
    mine, theirs = taken
    at = T0 + timedelta(minutes=40)
    beat(mine.host, at)
    with pytest.raises(NoCapacity) as refused:
        lc.instance_start(instance=mine, now=at)
    assert refused.value.message == (
        "no 2× H100 free on host node1; every H100 is in use; its /workspace is on that host: start it without "
        "GPUs (no-GPU mode, 0.12 USD/h) to reach your data, and with GPUs again when they "
        "are free"
    )

    with django_capture_on_commit_callbacks(execute=True):
        lc.instance_start(instance=mine, now=at, without_gpus=True)
    mine.refresh_from_db()
    assert mine.status == S.PENDING and mine.without_gpus and held(mine) == 0
    assert mine.status_reason == "started again on node1 without GPUs (no-GPU mode)"
    spec = sent[-1]["spec"]
    assert sent[-1]["task"] == "instance_start"
    assert spec["gpu_indices"] == [] and spec["gpu_uuids"] == []
    assert spec["cpu_count"] == 1.0 and spec["memory_mb"] == 2 * 1024  # NO_GPU_VCPUS, _MEMORY_GB
    assert spec["instance_id"] == str(mine.pk)  # the same workspace, on the same host

    lc.instance_report_running(instance_id=str(mine.pk), port=4000, container_id="c2", now=at)
    assert hourly_burn_of(user=mine.user) == Decimal("0.12")
    end = at + timedelta(minutes=30)
    beat(mine.host, end)
    meter_run(now=end)
    charge = Charge.objects.get(instance=mine, period_start=at)
    assert (charge.rate_kind, charge.gpu_count, charge.amount) == ("no_gpu", 0, Decimal("0.06"))
    assert "without GPUs" in LedgerEntry.objects.get(charge=charge).description

    # Bob is done: stopped and started without the flag, it takes its GPUs again at the
    # plan's rate.
    lc.instance_terminate(instance=theirs, now=end)
    lc.instance_report_removed(instance_id=str(theirs.pk), now=end)
    lc.instance_stop(instance=mine, now=end)
    lc.instance_report_stopped(instance_id=str(mine.pk), now=end)
    with django_capture_on_commit_callbacks(execute=True):
        lc.instance_start(instance=mine, now=end + timedelta(minutes=1))
    mine.refresh_from_db()
    assert not mine.without_gpus and held(mine) == 2
    assert sent[-1]["spec"]["gpu_indices"] == [0, 1] and sent[-1]["spec"]["cpu_count"] == 8.0
    assert hourly_burn_of(user=mine.user) == Decimal("4.00")


def test_the_balance_is_checked_at_the_no_gpu_rate(taken, alice, settings):
    mine, _ = taken
    # 10.00 of credit, 2.00 of it used: 100 h at the no-GPU rate (12.00) is too much; 50 h
    # (6.00) is not, though it would not pay 2 h of the plan's own rate.
    settings.BILLING_MIN_PREPAID_MINUTES = 100 * 60
    at = T0 + timedelta(minutes=40)
    beat(mine.host, at)
    with pytest.raises(InsufficientBalance, match=r"plan h100-x2 costs 0.12 USD/h, and a launch"):
        lc.instance_start(instance=mine, now=at, without_gpus=True)
    settings.BILLING_MIN_PREPAID_MINUTES = 50 * 60
    lc.instance_start(instance=mine, now=at, without_gpus=True)


def test_it_needs_its_host_to_answer(taken):
    mine, _ = taken
    beat(mine.host, T0)  # silent since
    with pytest.raises(InvalidTransition, match="its host node1 is not answering") as refused:
        lc.instance_start(instance=mine, now=T0 + timedelta(hours=1), without_gpus=True)
    assert refused.value.field == "without_gpus"
    mine.refresh_from_db()
    assert mine.status == S.STOPPED and not mine.without_gpus


def test_only_on_demand_instances_have_it(no_gpu_plan, make_host, alice):
    host = make_host("node1", no_gpu_plan.gpu_model)
    group = GroupFactory(user=alice, plan=no_gpu_plan)
    replica = InstanceFactory(
        user=alice,
        plan=no_gpu_plan,
        host=host,
        group=group,
        group_role="warm",
        status=S.STOPPED,
    )
    with pytest.raises(InvalidTransition, match="this is a replica of an elastic group"):
        lc.instance_start(instance=replica, without_gpus=True)
    with pytest.raises(IntegrityError, match="instance_no_gpu_mode_on_demand_only"):
        Instance.objects.filter(pk=replica.pk).update(without_gpus=True)
