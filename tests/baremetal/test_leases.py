"""Dedicated hosts: a lease holds the whole host, the database refuses overlaps, the clock
starts and ends leases, and the tenant launches into one."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from gpurental import protocol
from gpurental.baremetal import services
from gpurental.baremetal.models import Lease, LeaseEvent, LeaseStatus
from gpurental.fleet.models import Host
from gpurental.rentals import hostcalls
from gpurental.rentals import selectors as rental_selectors
from gpurental.rentals.exceptions import (
    InvalidTransition,
    NoCapacity,
    QuotaExceeded,
    RentalError,
)
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.selectors import between
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services import reservations as rs
from tests.factories import UserFactory

NOW = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)


def beat(host, at):
    Host.objects.filter(pk=host.pk).update(last_heartbeat_at=at)


def _assert_no_gpu_held_twice():
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT count(*) FROM rentals_allocation a JOIN rentals_allocation b
               ON a.gpu_id = b.gpu_id AND a.id < b.id AND a.period && b.period"""
        )
        assert cursor.fetchone()[0] == 0


# --- exclusive placement ----------------------------------------------------------


def test_a_lease_holds_every_gpu_and_on_demand_launches_go_elsewhere(
    alice, bob, whole_host_plan, one_gpu_plan, leasable, image, sent
):
    leased = leasable("node1", last_heartbeat_at=NOW)
    other = leasable("node2", last_heartbeat_at=NOW)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    assert lease.host == leased  # by name, the first matching host
    assert lease.status == LeaseStatus.ACTIVE and not lease.reserved
    assert Allocation.objects.filter(lease=lease).count() == 4
    # Bob's launches fill the other host and then find nothing: the leased host takes none.
    for _ in range(4):
        instance = lc.instance_launch(user=bob, image=image, plan=one_gpu_plan, now=NOW)
        assert instance.host == other
    with pytest.raises(NoCapacity):
        lc.instance_launch(user=bob, image=image, plan=one_gpu_plan, now=NOW)
    _assert_no_gpu_held_twice()


def test_a_host_with_a_running_instance_cannot_be_leased(
    alice, bob, whole_host_plan, one_gpu_plan, leasable, image, sent
):
    leasable("node1", last_heartbeat_at=NOW)
    lc.instance_launch(user=bob, image=image, plan=one_gpu_plan, now=NOW)
    with pytest.raises(NoCapacity, match="no whole 4× H100 host is free"):
        services.lease_book(user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW)
    assert not Lease.objects.exists()


def test_only_hosts_the_operator_offers_and_of_the_plan_s_exact_size_are_leased(
    alice, whole_host_plan, make_host, h100, leasable
):
    make_host("plain", h100, count=4, last_heartbeat_at=NOW)  # no bare-metal settings
    leasable("bigger", count=8, last_heartbeat_at=NOW)  # a 4-GPU lease would leave 4 to others
    with pytest.raises(NoCapacity):
        services.lease_book(user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW)


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_concurrent_on_demand_launches_and_a_lease_never_share_the_host(
    whole_host_plan, one_gpu_plan, leasable, image, sent
):
    leasable("node1", last_heartbeat_at=None)
    beat(Host.objects.get(name="node1"), datetime.now(UTC))
    tenant = UserFactory()
    renters = [UserFactory() for _ in range(4)]
    barrier = threading.Barrier(1 + len(renters))

    def lease():
        try:
            barrier.wait()
            return services.lease_book(
                user=tenant, plan=whole_host_plan, end=datetime.now(UTC) + timedelta(hours=2)
            )
        except NoCapacity as exc:
            return exc
        finally:
            connection.close()

    def launch(user):
        try:
            barrier.wait()
            return lc.instance_launch(user=user, image=image, plan=one_gpu_plan)
        except NoCapacity as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=5) as pool:
        leased = pool.submit(lease)
        launched = [pool.submit(launch, user) for user in renters]
        leased, launched = leased.result(), [f.result() for f in launched]
    instances = [r for r in launched if isinstance(r, Instance)]
    if isinstance(leased, Lease):
        assert instances == []  # every on-demand launch was refused on the leased host
        assert Allocation.objects.filter(lease=leased).count() == 4
    else:
        assert isinstance(leased, NoCapacity) and instances  # the launches won the host
        assert not Lease.objects.exists()
    _assert_no_gpu_held_twice()


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_concurrent_on_demand_launches_on_a_leased_host_are_all_refused(
    whole_host_plan, one_gpu_plan, leasable, image, sent
):
    now = datetime.now(UTC)
    leasable("node1", last_heartbeat_at=now)
    lease = services.lease_book(
        user=UserFactory(), plan=whole_host_plan, end=now + timedelta(hours=2)
    )
    renters = [UserFactory() for _ in range(6)]
    barrier = threading.Barrier(len(renters))

    def launch(user):
        try:
            barrier.wait()
            return lc.instance_launch(user=user, image=image, plan=one_gpu_plan)
        except NoCapacity as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(renters)) as pool:
        results = list(pool.map(launch, renters))
    assert all(isinstance(r, NoCapacity) for r in results)
    assert set(Allocation.objects.values_list("lease", flat=True)) == {lease.pk}
    assert not Instance.objects.exists() and sent == []


# --- the database refuses overlapping leases -----------------------------------------


@pytest.mark.backend
def test_overlapping_leases_of_one_host_are_refused_by_the_database(
    alice, bob, whole_host_plan, leasable
):
    host = leasable("node1", last_heartbeat_at=NOW)
    first = Lease.objects.create(
        user=alice,
        plan=whole_host_plan,
        host=host,
        period=between(NOW, NOW + timedelta(hours=3)),
        reserved=True,
    )
    with pytest.raises(IntegrityError, match="lease_no_host_double_booking"), transaction.atomic():
        Lease.objects.create(  # straight to the table, past every service check
            user=bob,
            plan=whole_host_plan,
            host=host,
            period=between(NOW + timedelta(hours=2), NOW + timedelta(hours=4)),
            reserved=True,
        )
    # Back to back is fine, and a cancelled lease holds nothing.
    Lease.objects.create(
        user=bob,
        plan=whole_host_plan,
        host=host,
        period=between(NOW + timedelta(hours=3), NOW + timedelta(hours=4)),
        reserved=True,
    )
    Lease.objects.filter(pk=first.pk).update(status=LeaseStatus.CANCELLED)
    Lease.objects.create(
        user=bob,
        plan=whole_host_plan,
        host=host,
        period=between(NOW, NOW + timedelta(hours=1)),
        reserved=True,
    )


def test_a_second_booking_over_a_leased_period_finds_no_host(alice, bob, whole_host_plan, leasable):
    leasable("node1", last_heartbeat_at=NOW)
    start = NOW + timedelta(days=2)
    services.lease_book(
        user=alice, plan=whole_host_plan, start=start, end=start + timedelta(hours=4), now=NOW
    )
    with pytest.raises(NoCapacity):
        services.lease_book(
            user=bob,
            plan=whole_host_plan,
            start=start + timedelta(hours=3),
            end=start + timedelta(hours=6),
            now=NOW,
        )
    later = services.lease_book(
        user=bob,
        plan=whole_host_plan,
        start=start + timedelta(hours=4),
        end=start + timedelta(hours=6),
        now=NOW,
    )
    assert later.status == LeaseStatus.BOOKED


# --- booking ahead, the clock, launching into the lease ----------------------------


def test_booked_ahead_the_clock_starts_it_the_tenant_launches_and_it_ends(
    alice, bob, whole_host_plan, one_gpu_plan, leasable, image, sent
):
    host = leasable("node1", last_heartbeat_at=NOW)
    start = NOW + timedelta(days=1)
    end = start + timedelta(hours=3)
    lease = services.lease_book(user=alice, plan=whole_host_plan, start=start, end=end, now=NOW)
    assert (lease.status, lease.reserved) == (LeaseStatus.BOOKED, True)
    # Booked ahead: the host takes no open-ended instance now, nor a reservation then.
    with pytest.raises(NoCapacity):
        lc.instance_launch(user=bob, image=image, plan=one_gpu_plan, now=NOW)
    with pytest.raises(NoCapacity):
        rs.reservation_book(user=bob, image=image, plan=one_gpu_plan, start=start, end=end, now=NOW)
    with pytest.raises(InvalidTransition, match="while it is active"):
        services.lease_launch(lease=lease, image=image, actor=alice, now=NOW)

    beat(host, start)
    assert services.leases_tick(now=start)["started"] == 1
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    instance = services.lease_launch(lease=lease, image=image, actor=alice, now=start)
    assert (instance.host, instance.lease, instance.gpu_count) == (host, lease, 4)
    assert set(Allocation.objects.filter(lease=lease).values_list("instance", flat=True)) == {
        instance.pk
    }
    with pytest.raises(InvalidTransition, match="already runs"):
        services.lease_launch(lease=lease, image=image, actor=alice, now=start)
    spec = hostcalls.container_spec(instance)  # what the start command carries
    assert protocol.spec_check(spec)  # a valid version-3 spec with the optional field
    assert sorted(spec["gpu_indices"]) == [0, 1, 2, 3]
    assert (spec["cpu_count"], spec["memory_mb"]) == (64.0, 512 * 1024)  # the whole host
    assert spec["dedicated"] == {"shm_size_mb": 16384, "host_network": False}
    with pytest.raises(InvalidTransition, match="cannot end early"):
        services.lease_end(lease=lease, actor=alice, now=start + timedelta(hours=1))

    beat(host, end)
    assert services.leases_tick(now=end)["ended"] == 1
    lease.refresh_from_db()
    instance.refresh_from_db()
    assert lease.status == LeaseStatus.ENDED and lease.billed_until == end
    assert instance.status == InstanceStatus.STOPPING
    assert list(lease.events.values_list("to_status", flat=True)) == [
        "booked",
        "active",
        "ended",
    ]


def test_start_spec_of_an_ordinary_instance_has_no_dedicated_options(
    bob, one_gpu_plan, leasable, image, sent
):
    leasable("node1", last_heartbeat_at=NOW)
    instance = lc.instance_launch(user=bob, image=image, plan=one_gpu_plan, now=NOW)
    spec = hostcalls.container_spec(instance)
    assert "dedicated" not in spec and spec["cpu_count"] == float(one_gpu_plan.vcpus)


def test_host_networking_only_on_hosts_that_allow_it(alice, whole_host_plan, leasable):
    leasable("closed", last_heartbeat_at=NOW)
    with pytest.raises(NoCapacity, match="allows host networking"):
        services.lease_book(
            user=alice,
            plan=whole_host_plan,
            end=NOW + timedelta(hours=2),
            host_network=True,
            now=NOW,
        )
    opened = leasable("open", last_heartbeat_at=NOW, allow_host_network=True)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), host_network=True, now=NOW
    )
    assert lease.host == opened


def test_cancel_before_the_window_frees_the_host_and_later_is_refused(
    alice, bob, whole_host_plan, leasable
):
    leasable("node1", last_heartbeat_at=NOW)
    start = NOW + timedelta(days=3)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, start=start, end=start + timedelta(hours=2), now=NOW
    )
    services.lease_cancel(lease=lease, actor=alice, now=NOW)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.CANCELLED
    assert not Allocation.objects.filter(lease=lease).exists()
    assert LeaseEvent.objects.filter(lease=lease, to_status="cancelled").count() == 1
    again = services.lease_book(
        user=bob, plan=whole_host_plan, start=start, end=start + timedelta(hours=2), now=NOW
    )
    with pytest.raises(InvalidTransition, match="24 hours before"):
        services.lease_cancel(lease=again, actor=bob, now=start - timedelta(hours=2))


def test_bad_periods_are_refused_naming_the_field(alice, whole_host_plan, leasable):
    leasable("node1", last_heartbeat_at=NOW)
    cases = [
        ({"start": NOW - timedelta(hours=1), "end": NOW + timedelta(hours=1)}, "start"),
        ({"end": NOW + timedelta(minutes=5)}, "end"),
        ({"end": datetime(2026, 6, 10, 12, 0)}, "end"),  # no time zone
        ({"start": NOW + timedelta(days=60), "end": NOW + timedelta(days=61)}, "start"),
    ]
    for kwargs, field in cases:
        with pytest.raises(RentalError) as caught:
            services.lease_book(user=alice, plan=whole_host_plan, now=NOW, **kwargs)
        assert caught.value.field == field


def test_a_stopped_instance_starts_again_only_inside_its_active_lease(
    alice, whole_host_plan, leasable, image, sent
):
    host = leasable("node1", last_heartbeat_at=NOW)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    instance = services.lease_launch(lease=lease, image=image, actor=alice, now=NOW)
    later = NOW + timedelta(minutes=10)  # the host silent by then: the stop is immediate
    lc.instance_stop(instance=instance, actor=alice, now=later)
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.STOPPED

    beat(host, later + timedelta(minutes=10))
    lc.instance_start(instance=instance, actor=alice, now=later + timedelta(minutes=10))
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.PENDING
    assert len(rental_selectors.instance_gpus(instance)) == 4  # the lease's own allocations
    assert not Allocation.objects.filter(period__upper_inf=True).exists()

    lc.instance_stop(instance=instance, actor=alice, now=later + timedelta(minutes=30))
    beat(host, later + timedelta(minutes=40))
    services.lease_end(lease=lease, actor=alice, now=later + timedelta(minutes=40))
    # After the lease the host is free, but the instance does not become an unbilled
    # on-demand run there.
    with pytest.raises(InvalidTransition, match="lease ran"):
        lc.instance_start(instance=instance, actor=alice, now=later + timedelta(minutes=41))
    assert not Allocation.objects.filter(period__upper_inf=True).exists()


def test_leases_count_against_the_at_once_quota_over_their_period(alice, whole_host_plan, leasable):
    leasable("node1", last_heartbeat_at=NOW)
    leasable("node2", last_heartbeat_at=NOW)
    alice.gpu_quota = 6
    alice.save()
    start = NOW + timedelta(days=1)
    services.lease_book(
        user=alice, plan=whole_host_plan, start=start, end=start + timedelta(hours=4), now=NOW
    )
    with pytest.raises(QuotaExceeded) as refused:
        services.lease_book(
            user=alice,
            plan=whole_host_plan,
            start=start + timedelta(hours=2),
            end=start + timedelta(hours=6),
            now=NOW,
        )
    assert refused.value.field == "plan" and "quota is 6 GPUs" in refused.value.message
    services.lease_book(  # back to back is not at once
        user=alice,
        plan=whole_host_plan,
        start=start + timedelta(hours=4),
        end=start + timedelta(hours=6),
        now=NOW,
    )


def test_staff_may_end_a_booked_ahead_lease_early_and_billing_stops_there(
    alice, carol, whole_host_plan, leasable
):
    host = leasable("node1", last_heartbeat_at=NOW)
    start = NOW + timedelta(days=1)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, start=start, end=start + timedelta(hours=4), now=NOW
    )
    beat(host, start)
    services.leases_tick(now=start)
    stop = start + timedelta(hours=1)
    beat(host, stop)
    with pytest.raises(InvalidTransition, match="cannot end early"):
        services.lease_end(lease=lease, actor=alice, now=stop)
    services.lease_end(lease=lease, actor=carol, now=stop)
    lease.refresh_from_db()
    assert (lease.status, lease.end, lease.billed_until) == ("ended", stop, stop)
    ended = lease.events.get(to_status="ended")
    assert ended.actor == carol
