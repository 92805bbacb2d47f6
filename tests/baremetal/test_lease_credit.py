"""A lease runs on credit only as far as the balance goes: booking holds its price, a
restart needs the commitments covered, and at zero credit it is warned, then ended."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from gpurental.baremetal import services
from gpurental.baremetal.models import Lease, LeaseStatus
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import balance_of, balance_status
from gpurental.billing.services import credit_add
from gpurental.billing.services.limits import limits_enforce
from gpurental.fleet.models import Host
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services import reservations
from tests.factories import UserFactory

NOW = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)  # no off-peak: 20.00/h on demand, 16.00 reserved


@pytest.fixture(autouse=True)
def balance_enforced(settings):
    settings.BILLING_ENFORCE_BALANCE = True


def beat(host, at):
    Host.objects.filter(pk=host.pk).update(last_heartbeat_at=at)


def test_a_second_back_to_back_lease_beyond_the_balance_is_refused_naming_the_amount(
    alice, whole_host_plan, leasable
):
    leasable("node1", last_heartbeat_at=NOW)
    credit_add(user=alice, amount=Decimal("16.00"))  # one reserved hour
    start = NOW + timedelta(days=1)
    hour = timedelta(hours=1)
    services.lease_book(user=alice, plan=whole_host_plan, start=start, end=start + hour, now=NOW)
    with pytest.raises(InsufficientBalance) as refused:
        services.lease_book(
            user=alice, plan=whole_host_plan, start=start + hour, end=start + 2 * hour, now=NOW
        )
    assert refused.value.field == "plan"
    assert refused.value.message == (
        "this lease costs 16.00 USD over its period; you have 0.00 USD to spend. Add at least "
        "16.00 USD of credit. (Your balance is 16.00 USD, and 16.00 USD of it is committed to "
        "your leases and to use not billed yet.)"
    )
    credit_add(user=alice, amount=Decimal("16.00"))
    services.lease_book(
        user=alice, plan=whole_host_plan, start=start + hour, end=start + 2 * hour, now=NOW
    )


def test_a_lease_s_commitment_counts_against_a_reservation_too(
    alice, whole_host_plan, one_gpu_plan, make_host, h100, leasable, image
):
    leasable("node1", last_heartbeat_at=NOW)
    make_host("node2", h100, count=1, last_heartbeat_at=NOW)
    credit_add(user=alice, amount=Decimal("16.00"))
    start = NOW + timedelta(days=1)
    services.lease_book(
        user=alice, plan=whole_host_plan, start=start, end=start + timedelta(hours=1), now=NOW
    )
    with pytest.raises(InsufficientBalance, match="you have 0.00 USD to spend"):
        reservations.reservation_book(
            user=alice,
            plan=one_gpu_plan,
            image=image,
            start=start + timedelta(hours=2),
            end=start + timedelta(hours=3),
            now=NOW,
        )


def _stopped_lease_instance(alice, whole_host_plan, leasable, image, settings):
    host = leasable("node1", last_heartbeat_at=NOW)
    settings.BILLING_ENFORCE_BALANCE = False  # booked on credit the operator allowed
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    instance = services.lease_launch(lease=lease, image=image, actor=alice, now=NOW)
    later = NOW + timedelta(minutes=10)  # the host silent by then: the stop is immediate
    lc.instance_stop(instance=instance, actor=alice, now=later)
    settings.BILLING_ENFORCE_BALANCE = True
    beat(host, later + timedelta(minutes=10))
    return instance, later + timedelta(minutes=10)


def test_a_stopped_lease_instance_s_restart_at_zero_balance_is_refused(
    alice, whole_host_plan, leasable, image, sent, settings
):
    instance, now = _stopped_lease_instance(alice, whole_host_plan, leasable, image, settings)
    assert balance_of(user=alice) == 0
    with pytest.raises(InsufficientBalance, match="committed to your leases") as refused:
        lc.instance_start(instance=instance, actor=alice, now=now)
    assert "add at least 40.00 USD of credit" in refused.value.message  # the 2 h at 20.00/h
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.STOPPED

    credit_add(user=alice, amount=Decimal("40.00"))
    lc.instance_start(instance=instance, actor=alice, now=now)
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.PENDING


def test_a_lease_at_zero_credit_is_warned_then_ended_after_the_grace_with_its_data_kept(
    alice, whole_host_plan, leasable, image, sent, settings
):
    host = leasable("node1", last_heartbeat_at=NOW)
    credit_add(user=alice, amount=Decimal("80.00"))  # the 4 hours at 20.00/h
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=4), now=NOW
    )
    instance = services.lease_launch(lease=lease, image=image, actor=alice, now=NOW)
    lc.instance_report_running(instance_id=str(instance.pk), port=4000, container_id="c", now=NOW)
    alice.credit_limit = Decimal("5.00")  # the grace past zero, as for an instance
    alice.save()

    # Staff take 70.00 back: 10.00 left, half an hour of the lease. The warning shows.
    LedgerEntry.objects.create(user=alice, kind="adjustment", amount=Decimal("-70.00"))
    status = balance_status(user=alice)
    assert (status.hourly_burn, status.low) == (Decimal("20.0000"), True)

    def at(minutes):
        moment = NOW + timedelta(minutes=minutes)
        beat(host, moment)
        services.leases_tick(now=moment)  # meters the lease
        return moment, limits_enforce(now=moment)

    _moment, stopped = at(45)  # −5.00: at the edge of the grace
    assert stopped == []
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE

    moment, stopped = at(47)  # −5.67: past it
    assert [i.pk for i in stopped] == [instance.pk]
    lease.refresh_from_db()
    instance.refresh_from_db()
    assert lease.status == LeaseStatus.ENDED and lease.ended_at == moment
    assert lease.billed_until == moment  # billing ends with it
    assert "ended because your balance is -5.67 USD" in lease.events.last().reason
    # Its data is kept, as for a stopped instance: stopped, never removed.
    assert instance.status == InstanceStatus.STOPPING
    assert "/workspace is kept" in instance.events.get(to_status="stopping").reason
    assert limits_enforce(now=moment) == []


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_two_leases_booked_at_once_on_one_lease_s_balance_get_one(whole_host_plan, leasable):
    leasable("node1", last_heartbeat_at=NOW)
    tenant = UserFactory()
    credit_add(user=tenant, amount=Decimal("16.00"))  # one reserved hour
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    barrier = threading.Barrier(2)

    def book(hour):
        try:
            barrier.wait()
            begin = start + timedelta(hours=hour)
            return services.lease_book(
                user=tenant, plan=whole_host_plan, start=begin, end=begin + timedelta(hours=1)
            )
        except InsufficientBalance as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [f.result() for f in [pool.submit(book, 0), pool.submit(book, 1)]]
    assert sorted(type(r).__name__ for r in results) == ["InsufficientBalance", "Lease"]
    assert Lease.objects.filter(user=tenant).count() == 1


def test_a_lease_with_no_instance_running_low_is_warned_by_e_mail(
    alice, whole_host_plan, leasable, settings, mailoutbox
):
    from gpurental.notifications.checks import low_balance_check

    leasable("node1", last_heartbeat_at=NOW)
    credit_add(user=alice, amount=Decimal("80.00"))
    services.lease_book(user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=4), now=NOW)
    LedgerEntry.objects.create(user=alice, kind="adjustment", amount=Decimal("-70.00"))
    assert balance_status(user=alice).low
    assert low_balance_check(now=NOW) == 1
