"""The autoscaler's tick against the real database and Redis: what it launches, promotes,
drains, parks and refuses, and the events it records. The agents' side is played by
their reports (the docker tests in test_groups_on_docker.py run the whole path).

Load comes the way a gateway reports it: ``load_write`` into Redis, read back by the tick.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
import time_machine
from django.utils import timezone

from gpurental.groups import services
from gpurental.groups.load import load_key, load_write
from gpurental.groups.models import Group, GroupEvent, LoadSample
from gpurental.rentals.events import state_redis
from gpurental.rentals.models import Instance
from gpurental.rentals.selectors import instance_gpus
from gpurental.rentals.services import lifecycle
from tests.factories import ImageTemplateFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def serving_image(db):
    return ImageTemplateFactory(slug="serving-echo", port=8000, http_ports=[8000])


@pytest.fixture
def host(make_host, a100):
    return make_host("node1", a100, count=8, address="203.0.113.7")


def apply(user, **spec) -> Group:
    body = {"name": "inference", "instance_type": "A100", "image": "serving-echo", **spec}
    group = services.group_apply(user=user, source=body).group
    state_redis().delete(load_key(group.pk))
    return group


def report_load(group, **figures):
    report = {
        "at": time.time(),
        "rps": 0.0,
        "inflight": 0.0,
        "queued": 0.0,
        "burst": 0.0,
        "inflight_now": 0,
        "queued_now": 0,
        "p50_ms": None,
        "p99_ms": None,
        "errors": 0,
        "requests": 0,
        "last_request_at": time.time(),
        "replicas": {},
    }
    report.update(figures)
    load_write(state_redis(), group.pk, report, process="test-gateway")


def replicas(group, role=None, status=None):
    found = Instance.objects.filter(group=group)
    if role:
        found = found.filter(group_role=role)
    if status:
        found = found.filter(status=status)
    return list(found.order_by("created_at", "pk"))  # as Replicas.of orders them


def run(instance):
    lifecycle.instance_report_running(instance_id=str(instance.pk), port=40000, container_id="c")


def stopped(instance):
    lifecycle.instance_report_stopped(instance_id=str(instance.pk))


def events(group, kind):
    return list(group.events.filter(kind=kind).values_list("reason", flat=True))


def test_a_new_group_launches_its_minimum(
    alice, serving_image, host, sent, django_capture_on_commit_callbacks
):
    group = apply(alice, min_nodes=2, max_nodes=4)
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.group_tick(group_id=group.pk)
    assert decision.desired == 2 and decision.reason == "0 → 2: min_nodes 2"
    launched = replicas(group, role="serving")
    assert len(launched) == 2 and all(r.status == "pending" for r in launched)
    assert all(r.idle_stop_minutes == 0 and r.plan == group.plan for r in launched)
    assert [m["task"] for m in sent] == ["instance_start", "instance_start"]
    assert events(group, "scaled") == ["0 → 2: min_nodes 2"]
    # Launching replicas count as capacity: the next tick launches nothing more.
    services.group_tick(group_id=group.pk)
    assert len(replicas(group)) == 2
    assert LoadSample.objects.filter(group=group).count() == 2


def test_queue_over_target_scales_out(alice, serving_image, host, sent):
    group = apply(
        alice, min_nodes=1, max_nodes=6, scaling_metrics={"metric": "queue", "threshold": 2}
    )
    services.group_tick(group_id=group.pk)
    run(replicas(group)[0])
    report_load(group, inflight=2.0, queued=4.0, burst=6.0, queued_now=4)
    decision = services.group_tick(group_id=group.pk)
    assert decision.desired == 3, decision.reason
    assert "queue 6.0 per replica vs target 2" in decision.reason
    assert len(replicas(group, role="serving")) == 3


def test_quota_and_balance_blocks_are_recorded_and_launch_nothing(
    alice, serving_image, host, sent, settings
):
    alice.gpu_quota = 1
    alice.save()
    group = apply(alice, min_nodes=2, max_nodes=4)
    services.group_tick(group_id=group.pk)
    assert len(replicas(group)) == 1
    (blocked,) = events(group, "blocked")
    assert blocked.startswith("scale-out blocked:") and "quota" in blocked

    settings.BILLING_ENFORCE_BALANCE = True
    other = apply(alice, name="other", min_nodes=0, max_nodes=2, warm_pool={"size": 1})
    alice.gpu_quota = 8
    alice.save()
    services.group_tick(group_id=other.pk)
    assert replicas(other) == []
    (blocked,) = events(other, "blocked")
    assert "warm pool refill blocked" in blocked and "balance" in blocked


def test_warm_pool_fills_parks_and_promotes(alice, serving_image, host, sent):
    group = apply(alice, min_nodes=0, max_nodes=3, warm_pool={"size": 2, "instance_type": "A100"},
                  scaling_metrics={"metric": "queue", "threshold": 2})  # fmt: skip
    services.group_tick(group_id=group.pk)
    warm = replicas(group, role="warm")
    assert len(warm) == 2 and replicas(group, role="serving") == []
    for replica in warm:
        run(replica)
    services.group_tick(group_id=group.pk)  # started once: parked
    assert {r.status for r in replicas(group, role="warm")} == {"stopping"}
    for replica in warm:
        stopped(replica)
    assert not any(instance_gpus(r) for r in warm)  # no GPU held while warm

    # A request waits at zero replicas: a warm replica is promoted, not a cold launch.
    report_load(group, queued=1.0, burst=1.0, queued_now=1)
    decision = services.group_tick(group_id=group.pk)
    assert decision.reason.startswith("0 → 1")
    (promoted,) = replicas(group, role="serving")
    assert promoted.pk in {w.pk for w in warm} and promoted.status == "pending"
    assert any("promoted from the warm pool" in e for e in events(group, "replica"))
    # The pool refills in the background: a new warm replica is on its way.
    assert len(replicas(group, role="warm")) == 2


def test_scale_in_drains_before_it_retires(alice, serving_image, host, sent, settings):
    settings.GROUP_DRAIN_TIMEOUT_S = 60
    group = apply(alice, min_nodes=1, max_nodes=4, cooldown={"scale_up": 0, "scale_down": 0},
                  scaling_metrics={"metric": "queue", "threshold": 2})  # fmt: skip
    group.min_replicas = 3
    group.save()
    services.group_tick(group_id=group.pk)
    for replica in replicas(group):
        run(replica)
    group.min_replicas = 2
    group.save()
    busy = replicas(group)[-1]
    report_load(group, replicas={str(busy.pk): {"inflight": 1, "healthy": True}})
    decision = services.group_tick(group_id=group.pk)
    assert decision.desired == 2 and decision.reason.startswith("3 → 2")
    (draining,) = replicas(group, role="draining")
    assert draining.pk == busy.pk and draining.status == "running"
    # Still a request in flight: it stays, even past the moment gateways have caught up.
    key = services._drain_key(draining.pk)
    state_redis().set(key, str(time.time() - 5))
    services.group_tick(group_id=group.pk)
    assert Instance.objects.get(pk=draining.pk).status == "running"
    # Finished: it goes (no warm pool here, so terminated).
    report_load(group, replicas={str(busy.pk): {"inflight": 0, "healthy": True}})
    services.group_tick(group_id=group.pk)
    assert Instance.objects.get(pk=draining.pk).status == "terminating"
    assert any("drained: terminated" in e for e in events(group, "replica"))


def test_schedule_raises_the_floor_in_its_window(alice, serving_image, host, sent, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    group = apply(
        alice, min_nodes=1, max_nodes=5, schedule={"cron": "* 9-17 * * 1-5", "min_nodes": 3}
    )
    # Thursday 10:00 in Shanghai is 02:00 UTC.
    with time_machine.travel(dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.UTC), tick=False):
        decision = services.group_tick(group_id=group.pk)
    assert decision.desired == 3 and "schedule asks for 3" in decision.reason
    other = apply(alice, name="night", min_nodes=1, max_nodes=5,
                  schedule={"cron": "* 9-17 * * 1-5", "min_nodes": 3})  # fmt: skip
    with time_machine.travel(dt.datetime(2026, 12, 3, 14, 0, tzinfo=dt.UTC), tick=False):
        assert services.group_tick(group_id=other.pk).desired == 1  # 22:00 there


def test_prewarm_starts_replicas_ahead_of_the_load_seen_on_past_days(
    alice, serving_image, host, sent
):
    group = apply(alice, min_nodes=1, max_nodes=8, prewarm_lead_minutes=15,
                  scaling_metrics={"metric": "queue", "threshold": 2})  # fmt: skip
    now = dt.datetime(2026, 12, 3, 8, 50, tzinfo=dt.UTC)
    for days, needed in [(1, 4), (2, 3), (3, 5), (4, 1)]:  # median 3.5
        at = dt.datetime(2026, 12, 3, 9, 5, tzinfo=dt.UTC) - dt.timedelta(days=days)
        LoadSample.objects.create(group=group, at=at, ready=needed, provisioning=0, warm=0,
                                  rps=1, inflight=0, queued=0, needed=needed)  # fmt: skip
    with time_machine.travel(now, tick=False):
        decision = services.group_tick(group_id=group.pk)
    assert decision.desired == 4 and "pre-warm: 4 needed soon on past days" in decision.reason
    assert len(replicas(group)) == 4


def test_delete_terminates_every_replica_then_the_group(alice, serving_image, host, sent):
    group = apply(alice, min_nodes=2, max_nodes=2, warm_pool={"size": 1})
    services.group_tick(group_id=group.pk)
    assert len(replicas(group)) == 3
    services.group_delete(group=group, actor=alice)
    assert {r.status for r in replicas(group)} == {"terminating"}
    for replica in replicas(group):
        lifecycle.instance_report_removed(instance_id=str(replica.pk))
    services.group_tick(group_id=group.pk, now=timezone.now())
    assert Group.objects.get(pk=group.pk).status == "deleted"
    assert GroupEvent.objects.filter(group=group, reason__contains="deleted").count() == 2


def test_the_round_forgets_samples_pre_warm_no_longer_needs(alice, serving_image, host, sent):
    from gpurental.groups.tasks import groups_tick

    group = apply(alice, min_nodes=0, max_nodes=2)
    now = timezone.now()
    for days in (1, 7, 9, 30):
        LoadSample.objects.create(group=group, at=now - dt.timedelta(days=days), ready=0,
                                  provisioning=0, warm=0, rps=0, inflight=0, queued=0, needed=0)  # fmt: skip
    groups_tick()
    kept = sorted(round((now - at).total_seconds() / 86400) for at in
                  LoadSample.objects.filter(at__lt=now - dt.timedelta(hours=1)).values_list("at", flat=True))  # fmt: skip
    assert kept == [1, 7]


def test_a_new_image_rolls_out_without_dropping_below_what_is_wanted(
    alice, serving_image, host, sent, settings
):
    settings.GROUP_DRAIN_TIMEOUT_S = 60
    ImageTemplateFactory(slug="serving-echo-v2", port=8000, http_ports=[8000])
    group = apply(alice, min_nodes=2, max_nodes=4, warm_pool={"size": 1})
    services.group_tick(group_id=group.pk)
    old = replicas(group, role="serving")
    (old_warm,) = replicas(group, role="warm")
    for replica in old:
        run(replica)

    applied = services.group_apply(
        user=alice,
        source={"name": "inference", "instance_type": "A100", "image": "serving-echo-v2",
                "min_nodes": 2, "max_nodes": 4, "warm_pool": {"size": 1}},
    )  # fmt: skip
    assert applied.changes == ["image: 'serving-echo' → 'serving-echo-v2'"]
    assert "rollout" in events(group, "applied")[-1]

    # New replicas are launched as from zero; the old ones keep serving; the old warm goes.
    services.group_tick(group_id=group.pk)
    new = [r for r in replicas(group, role="serving") if r.image.slug == "serving-echo-v2"]
    assert len(new) == 2 and all(r.status == "pending" for r in new)
    assert {r.group_role for r in Instance.objects.filter(pk__in=[o.pk for o in old])} == {
        "serving"
    }
    assert Instance.objects.get(pk=old_warm.pk).status == "terminating"

    # One new replica serves: one old one drains (two still serve), the other keeps serving.
    run(new[0])
    services.group_tick(group_id=group.pk)
    draining = replicas(group, role="draining")
    assert len(draining) == 1 and draining[0].pk in {o.pk for o in old}
    assert any("rollout: replaced by the new spec" in e for e in events(group, "replica"))
    # Both new ones serve: the last old one drains too, and nothing old goes to the pool.
    run(new[1])
    services.group_tick(group_id=group.pk)
    assert {r.pk for r in replicas(group, role="draining")} == {o.pk for o in old}
    for replica in old:
        state_redis().set(services._drain_key(replica.pk), str(time.time() - 5))
    services.group_tick(group_id=group.pk)
    assert {Instance.objects.get(pk=o.pk).status for o in old} == {"terminating"}
    pool = [r for r in replicas(group, role="warm") if r.pk != old_warm.pk]
    assert len(pool) == 1 and pool[0].image.slug == "serving-echo-v2"


def test_a_rollout_held_back_by_the_quota_makes_room_one_replica_at_a_time(
    alice, serving_image, host, sent
):
    ImageTemplateFactory(slug="serving-echo-v2", port=8000, http_ports=[8000])
    alice.gpu_quota = 2
    alice.save()
    group = apply(alice, min_nodes=2, max_nodes=2)
    services.group_tick(group_id=group.pk)
    old = replicas(group, role="serving")
    for replica in old:
        run(replica)
    services.group_apply(
        user=alice,
        source={"name": "inference", "instance_type": "A100", "image": "serving-echo-v2",
                "min_nodes": 2, "max_nodes": 2},
    )  # fmt: skip
    services.group_tick(group_id=group.pk)
    # No room for a new one: the oldest replica drains to make room; the other serves on.
    assert any("quota" in e for e in events(group, "blocked"))
    assert [r.pk for r in replicas(group, role="draining")] == [old[0].pk]
    assert Instance.objects.get(pk=old[1].pk).group_role == "serving"


def test_a_serving_replica_that_dies_is_replaced_by_a_warm_one_at_once(
    alice, serving_image, host, sent, monkeypatch, django_capture_on_commit_callbacks
):
    from gpurental.groups.tasks import GROUP_TICK
    from gpurental.rentals import hostcalls

    group = apply(alice, min_nodes=1, max_nodes=3, warm_pool={"size": 1, "instance_type": "A100"})
    services.group_tick(group_id=group.pk)
    (serving,), (warm,) = replicas(group, role="serving"), replicas(group, role="warm")
    run(serving)
    run(warm)
    services.group_tick(group_id=group.pk)  # the warm one is parked
    stopped(warm)
    # It scaled out a moment ago: a scale-out now would wait for the cooldown.
    Group.objects.filter(pk=group.pk).update(last_scale_up_at=timezone.now())

    woken = []
    record = hostcalls.app.send_task
    monkeypatch.setattr(
        hostcalls.app,
        "send_task",
        lambda name, **kw: woken.append(kw["kwargs"]) if name == GROUP_TICK else record(name, **kw),
    )
    with django_capture_on_commit_callbacks(execute=True):
        # Its container exited behind the platform's back (the agent's container list).
        lifecycle.instance_mark_vanished(instance=serving, state="exited", now=timezone.now())
    assert woken == [{"group_id": str(group.pk)}]  # the group looks now, not at its next round

    decision = services.group_tick(group_id=group.pk)
    assert "replacing 1 serving replica(s) gone" in decision.reason
    warm.refresh_from_db()
    assert (warm.group_role, warm.status) == ("serving", "pending")  # promoted, cooldown or not
    serving.refresh_from_db()
    assert serving.status in ("terminating", "terminated")


def test_a_replica_that_comes_up_tells_the_gateways_at_once(
    alice, serving_image, host, sent, django_capture_on_commit_callbacks
):
    from gpurental.groups.events import group_channel

    group = apply(alice, min_nodes=1, max_nodes=1)
    services.group_tick(group_id=group.pk)
    (replica,) = replicas(group, role="serving")
    listener = state_redis().pubsub(ignore_subscribe_messages=True)
    listener.subscribe(group_channel(group.pk))
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run(replica)
        deadline, message = time.monotonic() + 5, None
        while message is None and time.monotonic() < deadline:
            message = listener.get_message(timeout=1)  # None for the (ignored) subscribe
        assert message is not None and message["data"] == b"changed"
    finally:
        listener.close()
