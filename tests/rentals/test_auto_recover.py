"""Instances that come back: an auto_recover instance whose host is declared lost is
relaunched on another host, from its newest workspace snapshot; without auto_recover it
waits for its host, as before. (On real engines across hosts: tests/multihost.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.notifications.models import Notification
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from gpurental.volumes.models import Snapshot, SnapshotStatus
from tests.factories import GroupFactory

S = InstanceStatus


@pytest.fixture
def two_hosts(a100, make_host):
    """node1 (silent from t0 + 10 min, holding a running auto_recover instance) and node2."""
    t0 = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2)
    node1 = make_host("node1", a100, count=2, last_heartbeat_at=t0)
    return t0, node1


@pytest.fixture
def snapshots_configured(settings):
    """Snapshot settings, so a launch may start from one (presigning its download needs no
    object storage; the agent here is the recorded `sent`)."""
    settings.SNAPSHOT_S3_BUCKET = "snapshots"
    settings.SNAPSHOT_S3_ENDPOINT_URL = "http://127.0.0.1:9"
    settings.SNAPSHOT_S3_ACCESS_KEY_ID = "test"
    settings.SNAPSHOT_S3_SECRET_ACCESS_KEY = "test"


def _running(alice, image, a100, now, **kw):
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=2, now=now, **kw
    )
    lc.instance_report_running(instance_id=str(instance.pk), port=4000, container_id="c", now=now)
    instance.refresh_from_db()
    return instance


def _snapshot(instance, name, at):
    return Snapshot.objects.create(
        account=instance.user,
        name=name,
        instance=instance,
        status=SnapshotStatus.READY,
        object_key=f"ws/{instance.pk}/{name}",
        size_bytes=1024,
        sha256="0" * 64,
        created_at=at,
        ready_at=at,
    )


def _lose(host, last_beat, settings, capture):
    host.last_heartbeat_at = last_beat
    host.save()
    with capture(execute=True):
        fleet_reconcile(now=last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 1))


def test_a_lost_auto_recover_instance_runs_again_elsewhere_from_its_newest_snapshot(
    two_hosts,
    snapshots_configured,
    alice,
    image,
    a100,
    make_host,
    sent,
    settings,
    django_capture_on_commit_callbacks,
):
    t0, node1 = two_hosts
    old = _running(alice, image, a100, t0, auto_recover=True, name="trainer")
    _snapshot(old, "monday", t0 + timedelta(minutes=1))
    newest = _snapshot(old, "tuesday", t0 + timedelta(minutes=2))
    node2 = make_host("node2", a100, count=2)

    _lose(node1, t0 + timedelta(minutes=10), settings, django_capture_on_commit_callbacks)

    old.refresh_from_db()
    assert old.status == S.LOST  # its files stay on node1, which may come back
    assert not old.events.filter(step="auto_recover_failed").exists(), list(
        old.events.values_list("step", "reason")
    )
    new = Instance.objects.get(recovered_from=old)
    assert (new.host, new.workspace_from, new.name) == (node2, newest, "trainer")
    assert (new.image, new.plan, new.auto_recover) == (old.image, old.plan, True)
    assert new.status == S.PENDING and new.running_since is None  # billed once it runs
    starts = [m for m in sent if m["task"] == "instance_start"]
    assert str(new.pk) in str(starts[-1])  # node2's agent is told to start it
    notice = old.events.get(step="auto_recovered")
    assert f"relaunched as {new.pk} on node2" in notice.reason
    assert "snapshot tuesday" in notice.reason
    assert new.events.filter(step="recovered").exists()
    assert Notification.objects.filter(user=alice, event="instance_recovered").exists()

    # Recovered once: another reconcile pass relaunches nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        fleet_reconcile(now=t0 + timedelta(minutes=10, seconds=settings.HOST_LOST_AFTER + 30))
    assert Instance.objects.filter(recovered_from=old).count() == 1
    assert lc.instance_recover(instance_id=old.pk) is None


def test_without_auto_recover_a_lost_instance_waits_for_its_host(
    two_hosts, alice, image, a100, make_host, sent, settings, django_capture_on_commit_callbacks
):
    t0, node1 = two_hosts
    old = _running(alice, image, a100, t0)
    make_host("node2", a100, count=2)
    _lose(node1, t0 + timedelta(minutes=10), settings, django_capture_on_commit_callbacks)
    old.refresh_from_db()
    assert old.status == S.LOST
    assert not Instance.objects.filter(recovered_from=old).exists()


def test_with_no_snapshot_it_starts_empty_and_says_so(
    two_hosts, alice, image, a100, make_host, sent, settings, django_capture_on_commit_callbacks
):
    t0, node1 = two_hosts
    old = _running(alice, image, a100, t0, auto_recover=True)
    make_host("node2", a100, count=2)
    _lose(node1, t0 + timedelta(minutes=10), settings, django_capture_on_commit_callbacks)
    new = Instance.objects.get(recovered_from=old)
    assert new.workspace_from is None
    assert "an empty /workspace (it has no workspace snapshot)" in (
        old.events.get(step="auto_recovered").reason
    )


def test_with_nowhere_to_go_the_customer_is_told_why(
    two_hosts, alice, image, a100, sent, settings, django_capture_on_commit_callbacks
):
    t0, node1 = two_hosts
    old = _running(alice, image, a100, t0, auto_recover=True)
    _lose(node1, t0 + timedelta(minutes=10), settings, django_capture_on_commit_callbacks)
    old.refresh_from_db()
    assert old.status == S.LOST and not Instance.objects.filter(recovered_from=old).exists()
    assert old.events.get(step="auto_recover_failed").reason.startswith("auto-recover failed: ")
    assert Notification.objects.filter(user=alice, event="instance_recover_failed").exists()


def test_auto_recover_is_for_on_demand_instances_and_is_recorded(
    alice, image, a100, make_host, sent
):
    make_host("node1", a100)
    instance = _running(alice, image, a100, timezone.now())
    lc.instance_set_auto_recover(instance=instance, enabled=True, actor=alice)
    instance.refresh_from_db()
    assert instance.auto_recover
    assert "auto-recover on by" in instance.events.get(step="auto_recover").reason
    # An elastic group's replica: its group replaces it, so it is refused by name.
    Instance.objects.filter(pk=instance.pk).update(
        auto_recover=False, group=GroupFactory(user=alice, image=image), group_role="serving"
    )
    with pytest.raises(RentalError, match="only on-demand instances") as refused:
        lc.instance_set_auto_recover(instance=instance, enabled=True, actor=alice)
    assert refused.value.field == "auto_recover"


def test_the_console_turns_it_on_and_off_for_the_owner_only(
    client, alice, bob, image, a100, make_host, sent
):
    from django.urls import reverse

    make_host("node1", a100)
    instance = _running(alice, image, a100, timezone.now())
    url = reverse("instance_auto_recover", args=[instance.pk])
    client.force_login(alice)
    page = client.get(reverse("instance", args=[instance.pk])).text
    assert "off: if its host is lost, it waits for that host" in page and url in page
    page = client.post(url, {"enabled": "1"}, follow=True).text
    assert "Auto-recover is on" in page
    assert "on: if its host is lost, it runs again on another host" in page
    instance.refresh_from_db()
    assert instance.auto_recover
    client.force_login(bob)
    assert client.post(url, {"enabled": "0"}).status_code == 404
    instance.refresh_from_db()
    assert instance.auto_recover
