"""The state machine, driven by customer actions and the host agent's reports."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.fleet.models import Host
from gpurental.rentals.exceptions import InvalidTransition, NoCapacity
from gpurental.rentals.models import Allocation, Instance, InstanceEvent, InstanceStatus
from gpurental.rentals.services import lifecycle as lc

S = InstanceStatus


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    """Call a service and run its on-commit work (the agent commands)."""

    def call(service, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return service(**kwargs)

    return call


@pytest.fixture
def launched(alice, a100, make_host, image, sent, run):
    make_host("node1", a100)
    return run(lc.instance_launch, user=alice, image=image, gpu_model=a100, gpu_count=2)


@pytest.fixture
def running(launched, run):
    iid = str(launched.pk)
    run(
        lc.instance_report_progress,
        instance_id=iid,
        step="creating",
        message="creating container from x",
    )
    run(lc.instance_report_running, instance_id=iid, port=49153, container_id="abc123")
    launched.refresh_from_db()
    return launched


def _open_allocations(instance):
    return Allocation.objects.filter(instance=instance, period__upper_inf=True).count()


def test_progress_moves_pending_to_provisioning_and_logs_the_step(launched, run):
    run(
        lc.instance_report_progress,
        instance_id=str(launched.pk),
        step="pulling_image",
        message="pulling image",
    )
    launched.refresh_from_db()
    assert launched.status == S.PROVISIONING
    assert launched.events.filter(kind="progress", step="pulling_image").exists()


def test_running_report_records_port_and_starts_billing(running):
    assert running.status == S.RUNNING
    assert running.jupyter_port == 49153
    assert running.running_since is not None and running.stopped_at is None
    steps = list(running.events.filter(kind="progress").values_list("step", flat=True))
    assert steps == ["queued", "creating", "running"]


def test_how_long_jupyterlab_took_rides_on_the_running_report(launched, run):
    run(
        lc.instance_report_running,
        instance_id=str(launched.pk),
        port=49153,
        container_id="abc123",
        ready_s=2.34,
    )

    event = launched.events.get(kind="transition", to_status=S.RUNNING)
    assert event.reason == "JupyterLab is ready, 2.3 s after its container started"


def test_repeated_running_report_changes_nothing(running, run):
    before = running.events.count()
    run(lc.instance_report_running, instance_id=str(running.pk), port=49153, container_id="abc123")
    assert running.events.count() == before


def test_failed_first_launch_releases_gpus_charges_nothing_and_removes_everything(
    launched, run, sent
):
    run(
        lc.instance_report_failed,
        instance_id=str(launched.pk),
        reason="image x is not on this host",
    )
    launched.refresh_from_db()
    assert launched.status == S.FAILED
    assert (
        "image x is not on this host" in launched.status_reason
        and "Nothing was charged" in launched.status_reason
    )
    assert _open_allocations(launched) == 0
    assert launched.running_since is None
    assert sent[-1]["task"] == "instance_remove"


def test_stop_then_agent_confirms(running, run, sent, alice):
    run(lc.instance_stop, instance=running, actor=alice)
    running.refresh_from_db()
    assert running.status == S.STOPPING and running.stopped_at is not None
    assert sent[-1] == {
        "task": "instance_stop",
        "queue": "host.node1",
        "instance_id": str(running.pk),
        "keep_container": True,
    }
    assert _open_allocations(running) == 2  # still held until the container has stopped
    run(lc.instance_report_stopped, instance_id=str(running.pk))
    running.refresh_from_db()
    assert running.status == S.STOPPED
    assert _open_allocations(running) == 0


def test_stop_twice_is_harmless(running, run, alice, sent):
    run(lc.instance_stop, instance=running, actor=alice)
    run(lc.instance_stop, instance=running, actor=alice)
    assert [m["task"] for m in sent].count("instance_stop") == 1
    assert running.events.filter(to_status=S.STOPPING).count() == 1


def test_start_again_uses_the_same_host_and_new_gpus_there(running, run, alice, sent):
    run(lc.instance_stop, instance=running, actor=alice)
    run(lc.instance_report_stopped, instance_id=str(running.pk))
    run(lc.instance_start, instance=running, actor=alice)
    running.refresh_from_db()
    assert running.status == S.PENDING and running.host.name == "node1"
    assert _open_allocations(running) == 2
    assert sent[-1]["task"] == "instance_start"


def test_start_when_its_host_is_full_says_so(running, run, alice, bob, a100, image):
    run(lc.instance_stop, instance=running, actor=alice)
    run(lc.instance_report_stopped, instance_id=str(running.pk))
    run(lc.instance_launch, user=bob, image=image, gpu_model=a100, gpu_count=8)
    with pytest.raises(NoCapacity, match="no 2× A100 free on host node1"):
        run(lc.instance_start, instance=running, actor=alice)


def test_failed_start_of_an_instance_that_ran_before_keeps_its_workspace(running, run, alice, sent):
    run(lc.instance_stop, instance=running, actor=alice)
    run(lc.instance_report_stopped, instance_id=str(running.pk))
    run(lc.instance_start, instance=running, actor=alice)
    run(
        lc.instance_report_failed,
        instance_id=str(running.pk),
        reason="JupyterLab did not become ready",
    )
    running.refresh_from_db()
    assert running.status == S.STOPPED
    assert "/workspace kept" in running.status_reason
    assert sent[-1]["task"] == "instance_stop"  # never instance_remove


def test_restart_keeps_gpus_and_billing(running, run, alice, sent):
    since = running.running_since
    run(lc.instance_restart, instance=running, actor=alice)
    running.refresh_from_db()
    assert running.status == S.PROVISIONING and sent[-1]["task"] == "instance_restart"
    run(lc.instance_report_running, instance_id=str(running.pk), port=49200, container_id="def")
    running.refresh_from_db()
    assert running.status == S.RUNNING and running.jupyter_port == 49200
    assert running.running_since == since and _open_allocations(running) == 2


def test_terminate_removes_container_and_workspace(running, run, alice, sent):
    run(lc.instance_terminate, instance=running, actor=alice)
    running.refresh_from_db()
    assert running.status == S.TERMINATING and sent[-1]["task"] == "instance_remove"
    run(lc.instance_report_removed, instance_id=str(running.pk))
    running.refresh_from_db()
    assert running.status == S.TERMINATED and running.terminated_at is not None
    assert _open_allocations(running) == 0


@pytest.mark.parametrize("status", [S.PENDING, S.RUNNING, S.STOPPING])
def test_terminate_on_a_silent_host_ends_it_at_once_even_before_it_is_marked_lost(
    running, run, alice, sent, status
):
    """The host stopped heart-beating, and reconciliation has not marked it lost yet."""
    Instance.objects.filter(pk=running.pk).update(status=status)
    Host.objects.filter(pk=running.host_id).update(
        last_heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    run(lc.instance_terminate, instance=running, actor=alice)
    running.refresh_from_db()
    assert running.status == S.TERMINATED and "host unreachable" in running.status_reason
    assert _open_allocations(running) == 0


def test_terminated_instance_cannot_be_started(running, run, alice):
    run(lc.instance_terminate, instance=running, actor=alice)
    run(lc.instance_report_removed, instance_id=str(running.pk))
    with pytest.raises(InvalidTransition, match="cannot start an instance that is terminated"):
        run(lc.instance_start, instance=running, actor=alice)


def test_running_report_for_a_stopped_instance_stops_the_container_again(
    launched, run, alice, sent
):
    run(lc.instance_stop, instance=launched, actor=alice)
    run(lc.instance_report_running, instance_id=str(launched.pk), port=1234, container_id="late")
    launched.refresh_from_db()
    assert launched.status == S.STOPPING
    assert sent[-1]["task"] == "instance_stop"


def test_every_transition_is_an_event_with_from_and_to(running, run, alice):
    run(lc.instance_stop, instance=running, actor=alice)
    run(lc.instance_report_stopped, instance_id=str(running.pk))
    pairs = list(
        InstanceEvent.objects.filter(instance=running, kind="transition").values_list(
            "from_status", "to_status"
        )
    )
    assert pairs == [
        ("", "pending"),
        ("pending", "provisioning"),
        ("provisioning", "running"),
        ("running", "stopping"),
        ("stopping", "stopped"),
    ]


def test_stop_on_an_unreachable_host_finishes_at_once(running, run, alice):
    host = running.host
    host.last_heartbeat_at = timezone.now() - timezone.timedelta(minutes=10)
    host.save()
    run(lc.instance_stop, instance=running, actor=alice)
    running.refresh_from_db()
    assert running.status == S.STOPPED and "unreachable" in running.status_reason


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_progress_steps_reach_the_instance_channel_group_live(alice, a100, make_host, image, sent):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from gpurental.rentals.events import instance_group

    make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(instance_group(instance.pk), channel)
    iid = str(instance.pk)
    lc.instance_report_progress(instance_id=iid, step="creating", message="creating container")
    lc.instance_report_running(instance_id=iid, port=4000, container_id="c")

    async def receive_four():
        # One event loop for all receives: channels-redis keeps its receive buffer per loop.
        return [await layer.receive(channel) for _ in range(4)]

    received = async_to_sync(receive_four)()
    assert [(m["kind"], m["status"], m["step"]) for m in received] == [
        ("transition", "provisioning", ""),
        ("progress", "provisioning", "creating"),
        ("progress", "provisioning", "running"),
        ("transition", "running", ""),
    ]
    assert (
        received[-1]["from_status"] == "provisioning"
        and received[-1]["reason"] == "JupyterLab is ready"
    )


def _gpu_indices(instance):
    return sorted(
        Allocation.objects.filter(instance=instance, period__upper_inf=True).values_list(
            "gpu__index", flat=True
        )
    )


@pytest.fixture
def parked(alice, bob, a100, make_host, image, sent, run):
    """alice's instance on GPUs 2 and 3, parked (its container and network kept); 0 and 1
    free."""
    make_host("node1", a100)
    first = run(lc.instance_launch, user=bob, image=image, gpu_model=a100, gpu_count=2)
    instance = run(lc.instance_launch, user=alice, image=image, gpu_model=a100, gpu_count=2)
    run(lc.instance_report_running, instance_id=str(instance.pk), port=4000, container_id="c")
    run(lc.instance_terminate, instance=first, actor=bob)
    assert _gpu_indices(instance) == [2, 3]
    run(lc.instance_stop, instance=instance, actor=alice, park=True)
    run(lc.instance_report_stopped, instance_id=str(instance.pk))
    instance.refresh_from_db()
    return instance


def test_a_parking_stop_keeps_the_container_and_its_network(parked, sent):
    (stop,) = [m for m in sent if m["task"] == "instance_stop"]
    assert (stop["keep_container"], stop["park"]) == (True, True)
    assert parked.status == S.STOPPED and _gpu_indices(parked) == []


def test_a_plain_stop_keeps_the_container_to_be_saved_but_not_its_network(
    running, run, alice, sent
):
    run(lc.instance_stop, instance=running, actor=alice)
    (stop,) = [m for m in sent if m["task"] == "instance_stop"]
    assert stop["keep_container"] is True and "park" not in stop


def test_starting_the_same_run_keeps_its_secrets_and_takes_its_gpus_again(parked, run, sent):
    token, host_key = parked.jupyter_token, parked.ssh_host_key
    run(lc.instance_start, instance=parked, same_run=True)
    parked.refresh_from_db()
    # Its GPUs, not the lower free ones placement would choose: the spec is the one the
    # kept container was made for, so the agent only starts it.
    assert _gpu_indices(parked) == [2, 3]
    assert (parked.jupyter_token, parked.ssh_host_key) == (token, host_key)
    assert sent[-1]["task"] == "instance_start" and sent[-1]["spec"]["token"] == token
    assert "the kept container" in parked.status_reason


def test_the_same_run_moves_to_other_gpus_when_its_own_are_taken(parked, run, bob, a100, image):
    other = run(lc.instance_launch, user=bob, image=image, gpu_model=a100, gpu_count=2)
    for allocation, index in zip(other.allocations.order_by("gpu__index"), (2, 3), strict=True):
        allocation.gpu = allocation.gpu.host.gpus.get(index=index)
        allocation.save(update_fields=["gpu"])
    run(lc.instance_start, instance=parked, same_run=True)
    parked.refresh_from_db()
    assert parked.status == S.PENDING and len(_gpu_indices(parked)) == 2
    assert not {2, 3} & set(_gpu_indices(parked))


def test_a_plain_start_makes_new_secrets(parked, run):
    token = parked.jupyter_token
    run(lc.instance_start, instance=parked)
    parked.refresh_from_db()
    assert parked.jupyter_token != token and len(_gpu_indices(parked)) == 2
