"""A rack going quiet at once: the reconcile pass marks its hosts offline and their running
instances unreachable in a few statements however many there are, with every event, audit
row and notification a single transition makes (bench/reconcile.py measures it at 1,000)."""

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpurental.accounts.models import AuditEvent
from gpurental.fleet.models import HostStatus
from gpurental.notifications.models import Notification
from gpurental.rentals.models import InstanceEvent, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import hosts_mark_offline

S = InstanceStatus


def silent_rack(make_host, a100, alice, image, now, hosts: int, prefix: str):
    """``hosts`` hosts, each with one running instance, silent since a minute ago."""
    made = []
    for index in range(hosts):
        host = make_host(f"{prefix}{index}", a100, count=1)
        instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1, now=now)
        lc.instance_report_running(
            instance_id=str(instance.pk), port=4000, container_id="c", now=now
        )
        host.last_heartbeat_at = now - timedelta(seconds=60)
        host.save(update_fields=["last_heartbeat_at"])
        made.append((host, instance))
    return made


def pass_over(now, django_capture_on_commit_callbacks):
    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks(execute=True),
    ):
        names = hosts_mark_offline(now=now)
    return names, len(queries.captured_queries)


def test_a_silent_rack_goes_offline_with_every_record_in_a_few_statements(
    make_host, a100, alice, image, sent, monkeypatch, django_capture_on_commit_callbacks
):
    from gpurental.rentals import hostcalls

    queued = []
    monkeypatch.setattr(
        hostcalls.app,
        "send_task",
        lambda name, kwargs=None, **options: queued.append((name, kwargs)),
    )
    now = timezone.now()
    small = silent_rack(make_host, a100, alice, image, now - timedelta(minutes=5), 2, "a")
    names, few = pass_over(now, django_capture_on_commit_callbacks)
    assert sorted(names) == ["a0", "a1"]
    big = silent_rack(make_host, a100, alice, image, now - timedelta(minutes=5), 6, "b")
    names, more = pass_over(now, django_capture_on_commit_callbacks)
    # The rack of the first pass is still silent and still holds instances: settled again.
    assert sorted(names) == ["a0", "a1", *(f"b{i}" for i in range(6))]
    assert more == few  # the same statements for 8 hosts as for 2

    for host, instance in small + big:
        host.refresh_from_db()
        instance.refresh_from_db()
        assert host.status == HostStatus.OFFLINE
        assert instance.status == S.UNREACHABLE
        assert instance.stopped_at == host.last_heartbeat_at  # billing stops at the last beat
        assert f"host {host.name} stopped heart-beating" in instance.status_reason
        event = InstanceEvent.objects.filter(instance=instance, to_status=S.UNREACHABLE).get()
        assert event.from_status == S.RUNNING
        assert AuditEvent.objects.filter(action="host.offline", object_id=str(host.pk)).count() == 1

    # The notifications are made by the control worker, off the pass: one task per chunk.
    tasks = [kwargs for name, kwargs in queued if name.endswith("instances_notify")]
    assert [len(t["instance_ids"]) for t in tasks] == [2, 6]
    for task in tasks:
        assert lc.instances_notify(**task) == len(task["instance_ids"])
    assert Notification.objects.filter(event="instance_unreachable").count() == 8


def test_notifications_are_made_in_the_pass_when_the_broker_refuses_the_task(
    make_host, a100, alice, image, sent, monkeypatch, django_capture_on_commit_callbacks
):
    from gpurental.rentals import hostcalls

    def refuse(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(hostcalls.app, "send_task", refuse)
    now = timezone.now()
    silent_rack(make_host, a100, alice, image, now - timedelta(minutes=5), 2, "c")
    pass_over(now, django_capture_on_commit_callbacks)
    assert Notification.objects.filter(event="instance_unreachable").count() == 2
