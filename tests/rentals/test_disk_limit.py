"""The plan's disk_gb on measured /workspace use: a notice near it, a notice and a grace
period over it, then a stop that keeps the workspace."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.disk import GB, instances_disk_check

S = InstanceStatus


@pytest.fixture
def running(alice, a100, image, make_host, sent, settings):
    settings.DISK_GRACE_MINUTES = 10
    host = make_host("node1", a100)
    plan = a100.plans.get(gpu_count=1)
    plan.disk_gb = 10
    plan.save()
    start = timezone.now() - timedelta(hours=1)
    instance = lc.instance_launch(user=alice, image=image, plan=plan, now=start)
    lc.instance_report_running(instance_id=str(instance.pk), port=4000, container_id="c", now=start)
    instance.refresh_from_db()
    return host, instance


def check(host, instance, gigabytes, now):
    return instances_disk_check(host=host, usage={str(instance.pk): int(gigabytes * GB)}, now=now)


def notices(instance, step):
    return list(instance.events.filter(kind="notice", step=step).values_list("reason", flat=True))


def test_under_the_warning_level_nothing_happens(running):
    host, instance = running
    assert check(host, instance, 8.9, timezone.now()) == {}


def test_near_the_limit_the_owner_is_told_once(running):
    host, instance = running
    now = timezone.now()
    assert check(host, instance, 9.2, now) == {str(instance.pk): "warned"}
    assert check(host, instance, 9.5, now + timedelta(minutes=1)) == {}
    (reason,) = notices(instance, "disk_warning")
    assert "9.2 GB of the plan's 10 GB" in reason


def test_over_the_limit_a_grace_period_then_a_stop_that_keeps_the_workspace(running, sent):
    host, instance = running
    now = timezone.now()
    assert check(host, instance, 10.5, now) == {str(instance.pk): "over"}
    assert "Delete files within 10 minutes" in notices(instance, "disk_over")[0]
    assert check(host, instance, 10.6, now + timedelta(minutes=9)) == {}
    instance.refresh_from_db()
    assert instance.status == S.RUNNING
    assert check(host, instance, 10.6, now + timedelta(minutes=10)) == {str(instance.pk): "stopped"}
    instance.refresh_from_db()
    assert instance.status in (S.STOPPING, S.STOPPED) and "over the limit" in instance.status_reason
    assert "instance_remove" not in [m["task"] for m in sent]


def test_cleaning_up_in_time_keeps_it_running(running):
    host, instance = running
    now = timezone.now()
    check(host, instance, 10.5, now)
    check(host, instance, 4.0, now + timedelta(minutes=5))
    assert check(host, instance, 4.0, now + timedelta(minutes=11)) == {}
    instance.refresh_from_db()
    assert instance.status == S.RUNNING


def test_another_hosts_measurements_change_nothing(running, make_host, a100):
    host, instance = running
    other = make_host("node2", a100)
    assert check(other, instance, 50, timezone.now()) == {}
