"""Periodic reconciliation: lost hosts, stuck launches."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.accounts.models import AuditEvent
from gpurental.fleet.models import HostStatus
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile

S = InstanceStatus


@pytest.fixture
def running_on(alice, a100, image, sent):
    def make(host, now):
        instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=2, now=now)
        lc.instance_report_running(
            instance_id=str(instance.pk), port=4000, container_id="c", now=now
        )
        instance.refresh_from_db()
        return instance

    return make


def test_host_without_heartbeat_goes_offline_and_its_instances_are_lost(
    a100, make_host, running_on
):
    t0 = timezone.now() - timedelta(hours=1)
    host = make_host("node1", a100, last_heartbeat_at=t0)
    instance = running_on(host, t0)
    last_beat = t0 + timedelta(minutes=10)
    host.last_heartbeat_at = last_beat
    host.save()
    fleet_reconcile(now=last_beat + timedelta(minutes=5))
    host.refresh_from_db()
    instance.refresh_from_db()
    assert host.status == HostStatus.OFFLINE
    assert AuditEvent.objects.filter(action="host.offline", object_id=str(host.pk)).exists()
    assert instance.status == S.LOST
    # Never billed after the last heartbeat: billing and the GPU hold end there.
    assert instance.stopped_at == last_beat
    assert {a.period.upper for a in instance.allocations.all()} == {last_beat}


def test_reconcile_twice_changes_nothing_more(a100, make_host, running_on):
    t0 = timezone.now() - timedelta(hours=1)
    host = make_host("node1", a100, last_heartbeat_at=t0)
    instance = running_on(host, t0)
    fleet_reconcile()
    events = instance.events.count()
    fleet_reconcile()
    assert instance.events.count() == events


def test_launch_that_never_finishes_fails_after_the_timeout(
    alice, a100, make_host, image, sent, settings
):
    host = make_host("node1", a100)
    started = timezone.now()
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1, now=started)

    def reconcile_at(seconds):
        now = started + timedelta(seconds=seconds)
        host.last_heartbeat_at = now  # the host itself stays alive
        host.save()
        fleet_reconcile(now=now)
        instance.refresh_from_db()

    reconcile_at(settings.LAUNCH_TIMEOUT - 1)
    assert instance.status == S.PENDING
    reconcile_at(settings.LAUNCH_TIMEOUT + 1)
    assert instance.status == S.FAILED and "did not finish within" in instance.status_reason
    assert not instance.allocations.filter(period__upper_inf=True).exists()


def test_draining_host_keeps_its_running_instances(a100, make_host, running_on):
    host = make_host("node1", a100)
    instance = running_on(host, timezone.now())
    host.status = HostStatus.DRAINING
    host.save()
    fleet_reconcile()
    instance.refresh_from_db()
    assert instance.status == S.RUNNING
