"""One quota rule: what an account holds over [start, end), whatever booked it (instances,
reservations, leases), checked by every booking path; a team's quota is the operator's."""

# The dedicated-host fixtures are imported below; pytest passes them in by name.
# ruff: noqa: F811

from datetime import UTC, datetime, timedelta

import pytest

from gpurental.accounts.models import User
from gpurental.baremetal import services as baremetal
from gpurental.rentals import holdings
from gpurental.rentals.exceptions import QuotaExceeded
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services import reservations as rs
from gpurental.teams import services as teams

# The dedicated-host fixtures: a 4× H100 whole-host plan, 1× H100, leasable hosts.
from tests.baremetal.conftest import h100, leasable, one_gpu_plan, whole_host_plan  # noqa: F401

NOW = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)
START = NOW + timedelta(days=1)


def reserve(user, plan, image, start, hours):
    return rs.reservation_book(
        user=user,
        plan=plan,
        image=image,
        start=start,
        end=start + timedelta(hours=hours),
        now=NOW,
    )


def quota(account, gpus):
    User.objects.filter(pk=account.pk).update(gpu_quota=gpus)
    account.refresh_from_db()


def test_a_full_quota_lease_then_a_reservation_over_the_same_hours_is_refused(
    alice, whole_host_plan, one_gpu_plan, leasable, make_host, h100, image
):
    leasable("node1", last_heartbeat_at=NOW)
    make_host("node2", h100, count=2, last_heartbeat_at=NOW)
    quota(alice, 4)
    baremetal.lease_book(
        user=alice, plan=whole_host_plan, start=START, end=START + timedelta(hours=4), now=NOW
    )
    with pytest.raises(QuotaExceeded) as refused:
        reserve(alice, one_gpu_plan, image, START + timedelta(hours=3), 2)
    assert refused.value.field == "gpu_count"
    assert refused.value.message.startswith("your quota is 4 GPUs at once and you hold 4; 1 more")
    # Back to back is not at once.
    reserve(alice, one_gpu_plan, image, START + timedelta(hours=4), 1)


def test_a_reservation_then_a_lease_over_the_same_hours_is_refused(
    alice, whole_host_plan, one_gpu_plan, leasable, make_host, h100, image
):
    leasable("node1", last_heartbeat_at=NOW)
    make_host("node2", h100, count=2, last_heartbeat_at=NOW)
    quota(alice, 4)
    reserve(alice, one_gpu_plan, image, START, 2)
    with pytest.raises(QuotaExceeded, match="you hold 1; 4 more") as refused:
        baremetal.lease_book(
            user=alice, plan=whole_host_plan, start=START, end=START + timedelta(hours=4), now=NOW
        )
    assert refused.value.field == "plan"


def test_what_runs_on_demand_counts_against_a_booking_ahead_and_the_reverse(
    alice, one_gpu_plan, make_host, h100, image, sent
):
    make_host("node1", h100, count=4, last_heartbeat_at=NOW)
    quota(alice, 2)
    running = lc.instance_launch(user=alice, image=image, plan=one_gpu_plan, now=NOW)
    reserve(alice, one_gpu_plan, image, START, 1)
    # The instance holds its GPU from now on, the reservation one tomorrow: 2 of 2.
    assert holdings.gpus_held(account=alice, start=START) == 2
    with pytest.raises(QuotaExceeded):
        lc.instance_launch(user=alice, image=image, plan=one_gpu_plan, now=NOW)
    lc.instance_stop(instance=running, actor=alice, now=NOW + timedelta(seconds=10))
    lc.instance_report_stopped(instance_id=str(running.pk), now=NOW + timedelta(seconds=10))
    lc.instance_launch(user=alice, image=image, plan=one_gpu_plan, now=NOW + timedelta(seconds=20))


def test_a_user_who_creates_a_team_cannot_launch_on_it_until_staff_set_its_quota(
    alice, a100, image, make_host, sent
):
    make_host("node1", a100, count=8)
    quota(alice, 0)  # no GPUs for alice herself
    team = teams.team_create(creator=alice, name="Side Door", slug="side-door")
    assert team.account.gpu_quota == 0
    with pytest.raises(QuotaExceeded) as refused:
        lc.instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1)
    assert refused.value.message == (
        "this team's quota is 0 GPUs at once and it holds 0 over that period; 1 more would "
        "exceed it. A team's quota is set by the operator: ask them to raise it."
    )
    quota(team.account, 2)  # staff, in the admin
    instance = lc.instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1)
    assert instance.status == InstanceStatus.PENDING
    with pytest.raises(QuotaExceeded, match="your quota is 0 GPUs"):  # alice's own is hers
        lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
