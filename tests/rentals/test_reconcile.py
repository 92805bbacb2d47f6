"""Reconciliation: silent hosts (unreachable, then lost), hosts coming back, stuck launches.
Nothing a customer stored is removed except by a terminate."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.accounts.models import AuditEvent
from gpurental.billing.models import Charge
from gpurental.billing.services.metering import meter_run
from gpurental.fleet.models import HostStatus
from gpurental.fleet.services import host_heartbeat_receive
from gpurental.rentals.exceptions import NoCapacity
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from tests.messages import signed

S = InstanceStatus


@pytest.fixture
def running_on(alice, a100, image, sent):
    def make(host, now, count=2):
        instance = lc.instance_launch(
            user=alice, image=image, gpu_model=a100, gpu_count=count, now=now
        )
        lc.instance_report_running(
            instance_id=str(instance.pk), port=4000, container_id="c", now=now
        )
        instance.refresh_from_db()
        return instance

    return make


@pytest.fixture
def beat(django_capture_on_commit_callbacks):
    def send(host, *, at, containers=None):
        with django_capture_on_commit_callbacks(execute=True):
            _beat(host, at=at, containers=containers)

    return send


def _beat(host, *, at, containers=None):
    """The host's agent heart-beats at ``at``, with the container list it took then."""
    return host_heartbeat_receive(
        message=signed(
            host,
            inventory=None,
            containers=containers,
            containers_listed_at=at.timestamp() if containers is not None else None,
            runtime="docker",
            gpu_source="simulated",
            agent_version="test",
            sent_at=at.timestamp(),
        ),
        now=at,
    )


def held(instance) -> int:
    return instance.allocations.filter(period__upper_inf=True).count()


def charged_spans(instance):
    return [
        (c.period_start, c.period_end)
        for c in Charge.objects.filter(instance=instance).order_by("period_start")
    ]


def commands(sent, instance):
    return [m["task"] for m in sent if m.get("instance_id") == str(instance.pk)]


@pytest.fixture
def silent_host(a100, make_host, running_on):
    """node1 with a running instance; its last heartbeat 10 minutes after t0."""
    t0 = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2)
    host = make_host("node1", a100, last_heartbeat_at=t0)
    instance = running_on(host, t0)
    last_beat = t0 + timedelta(minutes=10)
    host.last_heartbeat_at = last_beat
    host.save()
    return host, instance, last_beat


def test_a_silent_host_makes_its_instances_unreachable_with_gpus_held_and_billing_stopped(
    silent_host, settings
):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(seconds=settings.HOST_OFFLINE_AFTER + 1))
    host.refresh_from_db()
    instance.refresh_from_db()
    assert host.status == HostStatus.OFFLINE
    assert AuditEvent.objects.filter(action="host.offline", object_id=str(host.pk)).exists()
    assert instance.status == S.UNREACHABLE
    assert instance.stopped_at == last_beat  # never billed after the last heartbeat
    assert held(instance) == 2


def test_a_host_silent_for_less_than_the_offline_time_changes_nothing(silent_host, settings):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(seconds=settings.HOST_OFFLINE_AFTER - 1))
    instance.refresh_from_db()
    assert instance.status == S.RUNNING


def test_a_host_back_in_time_resumes_billing_from_its_first_new_heartbeat(
    silent_host, settings, beat
):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(minutes=1))
    back = last_beat + timedelta(minutes=5)
    beat(host, at=back, containers={str(instance.pk): "running"})
    instance.refresh_from_db()
    assert instance.status == S.RUNNING
    assert instance.running_since == back and instance.stopped_at is None
    assert held(instance) == 2
    reason = instance.events.filter(to_status=S.RUNNING).last().reason
    assert "not billed from" in reason and "back" in reason

    beat(host, at=back + timedelta(minutes=10))
    meter_run(now=back + timedelta(minutes=10))
    spans = charged_spans(instance)
    start_of_run = instance.events.filter(to_status=S.RUNNING).first().created_at
    # Billed up to the last heartbeat, then from the first new one: the silent gap never.
    assert spans[0][0] == start_of_run
    assert max(end for _, end in spans if end <= back) == last_beat
    assert min(start for start, _ in spans if start >= last_beat) == back
    assert not [s for s in spans if s[0] < back and s[1] > last_beat]
    meter_run(now=back + timedelta(minutes=10))
    assert charged_spans(instance) == spans  # and never twice


def test_a_container_list_taken_before_the_host_went_silent_does_not_bring_it_back(
    silent_host, settings
):
    host, instance, last_beat = silent_host
    marked = last_beat + timedelta(minutes=1)
    fleet_reconcile(now=marked)
    # A beat sent later, carrying a list taken before the instance became unreachable.
    host_heartbeat_receive(
        message=signed(
            host,
            inventory=None,
            containers={str(instance.pk): "running"},
            containers_listed_at=(marked - timedelta(seconds=5)).timestamp(),
            runtime="docker",
            gpu_source="simulated",
            agent_version="test",
            sent_at=(marked + timedelta(seconds=5)).timestamp(),
        ),
        now=marked + timedelta(seconds=5),
    )
    instance.refresh_from_db()
    assert instance.status == S.UNREACHABLE


def test_a_host_back_without_the_container_stops_the_instance_and_keeps_its_workspace(
    silent_host, sent, beat
):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(minutes=1))
    beat(host, at=last_beat + timedelta(minutes=3), containers={str(instance.pk): "exited"})
    instance.refresh_from_db()
    assert instance.status == S.STOPPED and "/workspace kept" in instance.status_reason
    assert held(instance) == 0
    assert instance.stopped_at == last_beat
    assert "instance_remove" not in commands(sent, instance)


def test_after_the_lost_time_the_gpus_are_released_but_nothing_is_removed(
    silent_host, settings, sent
):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(minutes=1))
    fleet_reconcile(now=last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 1))
    instance.refresh_from_db()
    assert instance.status == S.LOST
    assert held(instance) == 0
    assert instance.stopped_at == last_beat
    assert "instance_remove" not in commands(sent, instance)


def test_a_lost_hosts_return_stops_its_containers_and_the_instance_can_start_again(
    silent_host, settings, sent, alice, beat
):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 1))
    back = last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 60)
    beat(host, at=back, containers={str(instance.pk): "running"})
    instance.refresh_from_db()
    assert instance.status == S.STOPPED and "start it again" in instance.status_reason
    assert commands(sent, instance)[-1] == "instance_stop"
    assert "instance_remove" not in commands(sent, instance)
    beat(host, at=back + timedelta(seconds=10), containers={str(instance.pk): "stopped"})

    lc.instance_start(instance=instance, actor=alice, now=back + timedelta(seconds=20))
    instance.refresh_from_db()
    assert instance.status == S.PENDING and instance.host_id == host.pk


def test_a_lost_instance_whose_gpus_were_taken_says_when_they_free_up(
    silent_host, settings, alice, bob, a100, image, sent, beat
):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 1))
    back = last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 60)
    beat(host, at=back, containers={str(instance.pk): "stopped"})
    # Meanwhile every GPU of node1 went to others (8 GPUs: 4 × 2).
    for _ in range(4):
        lc.instance_launch(user=bob, image=image, gpu_model=a100, gpu_count=2, now=back)
    with pytest.raises(NoCapacity, match="on host node1"):
        lc.instance_start(instance=instance, actor=alice, now=back + timedelta(seconds=5))


def test_stopping_an_unreachable_instance_frees_its_gpus_at_once(silent_host, alice, sent):
    host, instance, last_beat = silent_host
    fleet_reconcile(now=last_beat + timedelta(minutes=1))
    instance.refresh_from_db()
    lc.instance_stop(instance=instance, actor=alice, now=last_beat + timedelta(minutes=2))
    instance.refresh_from_db()
    assert instance.status == S.STOPPED and held(instance) == 0
    assert instance.stopped_at == last_beat


def test_leftover_containers_are_stopped_and_only_a_terminated_instances_removed(
    a100, make_host, running_on, alice, sent, beat
):
    now = timezone.now()
    host = make_host("node1", a100, last_heartbeat_at=now)
    kept = running_on(host, now - timedelta(minutes=5))
    gone = running_on(host, now - timedelta(minutes=5))
    lc.instance_terminate(instance=gone, actor=alice, now=now - timedelta(minutes=4))
    lc.instance_report_removed(instance_id=str(gone.pk), now=now - timedelta(minutes=4))
    stranger = "0b6b1c62-4f7a-4d7e-9d36-6a6f3f6f0001"
    sent.clear()
    beat(
        host,
        at=now,
        containers={stranger: "running", str(gone.pk): "running", str(kept.pk): "running"},
    )
    by_id = {m["instance_id"]: m["task"] for m in sent}
    assert by_id == {stranger: "instance_stop", str(gone.pk): "instance_remove"}


def test_a_running_instance_whose_container_exited_is_stopped_with_its_workspace(
    a100, make_host, running_on, sent, beat
):
    now = timezone.now()
    host = make_host("node1", a100, last_heartbeat_at=now)
    instance = running_on(host, now - timedelta(minutes=5))
    beat(host, at=now, containers={str(instance.pk): "exited"})
    instance.refresh_from_db()
    assert instance.status == S.STOPPED and "/workspace kept" in instance.status_reason
    assert instance.stopped_at == now and held(instance) == 0
    assert "instance_remove" not in commands(sent, instance)


def test_a_late_heartbeat_counts_from_when_the_agent_sent_it(a100, make_host, settings):
    """A busy control worker reads beats late; the host was alive when it sent them."""
    now = timezone.now()
    host = make_host("node1", a100, last_heartbeat_at=now - timedelta(minutes=2))
    sent_at = now - timedelta(seconds=40)
    host_heartbeat_receive(
        message=signed(
            host,
            inventory=None,
            containers=None,
            runtime="docker",
            gpu_source="simulated",
            agent_version="test",
            sent_at=sent_at.timestamp(),
        ),
        now=now,
    )
    host.refresh_from_db()
    assert abs((host.last_heartbeat_at - sent_at).total_seconds()) < 0.001


def test_reconcile_twice_changes_nothing_more(silent_host, settings):
    host, instance, last_beat = silent_host
    later = last_beat + timedelta(seconds=settings.HOST_LOST_AFTER + 1)
    fleet_reconcile(now=later)
    events = instance.events.count()
    fleet_reconcile(now=later)
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


def test_a_stopped_instances_kept_container_is_left_alone_and_a_running_one_stopped(
    a100, make_host, running_on, alice, sent, beat
):
    from tests.factories import GroupFactory

    now = timezone.now()
    host = make_host("node1", a100, last_heartbeat_at=now)
    warm, plain = (
        running_on(host, now - timedelta(minutes=5)),
        running_on(host, now - timedelta(minutes=5)),
    )
    warm.group, warm.group_role = GroupFactory(user=alice), "warm"
    warm.save(update_fields=["group", "group_role"])
    for instance in (warm, plain):
        lc.instance_stop(instance=instance, actor=alice, now=now - timedelta(minutes=4))
        lc.instance_report_stopped(instance_id=str(instance.pk), now=now - timedelta(minutes=4))
    sent.clear()
    beat(host, at=now, containers={str(warm.pk): "exited", str(plain.pk): "created"})
    # Both kept: a warm replica's parked, a plain one's to be saved until its next start.
    assert sent == []
    beat(
        host,
        at=now + timedelta(seconds=5),
        containers={str(warm.pk): "running", str(plain.pk): "running"},
    )
    # Stopped but running: stopped again, and kept.
    assert commands(sent, warm) == commands(sent, plain) == ["instance_stop"]
    assert all(m["keep_container"] is True for m in sent)


@pytest.fixture
def reconcile_state():
    """The periodic pass's memory, cleared before and after (it lives in the cache)."""
    from django.core.cache import cache

    from gpurental.rentals.services import reconcile as rc

    cache.delete_many([rc.LAST_RUN_KEY, rc.HEARD_SINCE_KEY])
    yield cache
    cache.delete_many([rc.LAST_RUN_KEY, rc.HEARD_SINCE_KEY])


def test_an_outage_of_the_control_plane_marks_no_live_host_offline(
    silent_host, settings, reconcile_state
):
    """The database (or the control worker) was down for longer than HOST_OFFLINE_AFTER:
    the host's beats of that time were never recorded. The first passes after it judge
    silence only over the time they have been listening."""
    from gpurental.rentals.services import reconcile as rc

    host, instance, last_beat = silent_host
    before_outage = last_beat + timedelta(seconds=1)
    reconcile_state.set_many({rc.LAST_RUN_KEY: before_outage, rc.HEARD_SINCE_KEY: before_outage})
    back = last_beat + timedelta(minutes=5)  # no pass ran in between: the database was down
    rc.reconcile_pass(now=back)
    rc.reconcile_pass(now=back + timedelta(seconds=settings.RECONCILE_INTERVAL))
    host.refresh_from_db()
    instance.refresh_from_db()
    assert host.status == HostStatus.ACTIVE
    assert instance.status == S.RUNNING
    # A host that stays silent while the control plane listens goes offline as ever.
    step = timedelta(seconds=settings.RECONCILE_INTERVAL)
    now = back + step
    while now <= back + timedelta(seconds=settings.HOST_OFFLINE_AFTER) + step:
        now += step
        rc.reconcile_pass(now=now)
    host.refresh_from_db()
    instance.refresh_from_db()
    assert host.status == HostStatus.OFFLINE
    assert instance.status == S.UNREACHABLE and instance.stopped_at == last_beat


def test_a_pass_without_a_gap_marks_a_silent_host_offline_at_once(
    silent_host, settings, reconcile_state
):
    from gpurental.rentals.services import reconcile as rc

    host, instance, last_beat = silent_host
    now = last_beat + timedelta(seconds=settings.HOST_OFFLINE_AFTER + 1)
    listening = last_beat - timedelta(hours=1)
    reconcile_state.set_many(
        {
            rc.LAST_RUN_KEY: now - timedelta(seconds=settings.RECONCILE_INTERVAL),
            rc.HEARD_SINCE_KEY: listening,
        }
    )
    assert rc.reconcile_pass(now=now) == listening
    host.refresh_from_db()
    assert host.status == HostStatus.OFFLINE
