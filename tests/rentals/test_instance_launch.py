"""Launching: GPUs held in the database, the agent told on commit, clear refusals."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.fleet.models import HostStatus
from gpurental.rentals.exceptions import NoCapacity, QuotaExceeded, RentalError
from gpurental.rentals.models import (
    Allocation,
    Instance,
    InstanceEvent,
    InstanceStatus,
    Reservation,
)
from gpurental.rentals.services.lifecycle import instance_launch
from tests.factories import UserFactory, period


@pytest.fixture
def launch(django_capture_on_commit_callbacks, image):
    def run(user, **kwargs):
        kwargs.setdefault("image", image)
        with django_capture_on_commit_callbacks(execute=True):
            return instance_launch(user=user, **kwargs)

    return run


def test_launch_holds_gpus_and_tells_the_hosts_agent(alice, a100, make_host, sent, launch):
    host = make_host("node1", a100)
    instance = launch(alice, gpu_model=a100, gpu_count=2)
    assert instance.status == InstanceStatus.PENDING
    assert instance.host == host
    held = Allocation.objects.filter(instance=instance)
    assert held.count() == 2 and all(a.period.upper is None for a in held)
    assert [m["task"] for m in sent] == ["instance_start"]
    spec = sent[0]["spec"]
    assert sent[0]["queue"] == "host.node1"
    assert spec["instance_id"] == str(instance.pk)
    assert spec["gpu_indices"] == [0, 1]
    assert spec["token"] == instance.jupyter_token and len(instance.jupyter_token) >= 32
    steps = list(
        InstanceEvent.objects.filter(instance=instance).values_list("kind", "to_status", "step")
    )
    assert steps == [("transition", "pending", ""), ("progress", "", "queued")]


def test_launch_by_plan(alice, a100, make_host, sent, launch):
    make_host("node1", a100)
    plan = a100.plans.get(gpu_count=4)
    instance = launch(alice, plan=plan)
    assert instance.gpu_count == 4 and instance.plan == plan


def test_gpu_count_without_a_plan_is_refused_naming_the_choices(alice, a100, make_host, launch):
    make_host("node1", a100)
    with pytest.raises(
        RentalError, match=r"no plan offers 3× A100; GPU counts offered: 1, 2, 4, 8"
    ) as err:
        launch(alice, gpu_model=a100, gpu_count=3)
    assert err.value.field == "gpu_count"


def test_no_capacity_says_what_was_asked_and_what_is_free(
    alice, bob, a100, make_host, sent, launch
):
    make_host("node1", a100, count=2)
    make_host("node2", a100, count=1)
    with pytest.raises(NoCapacity) as err:
        launch(alice, gpu_model=a100, gpu_count=4)
    assert str(err.value) == (
        "no 4× A100 free on any host; 3 A100 free in all, at most 2 together (on node1); "
        "a launch needs all its GPUs on one host"
    )
    assert not Instance.objects.exists() and not Allocation.objects.exists()


def test_no_capacity_tells_when_a_booked_gpu_frees_up(alice, a100, make_host, launch, image):
    host = make_host("node1", a100, count=1)
    start = timezone.now() - timedelta(minutes=5)
    reservation = Reservation.objects.create(
        user=alice,
        plan=a100.plans.get(gpu_count=1),
        gpu_model=a100,
        gpu_count=1,
        image=image,
        period=period(start, 2),
        price=0,
    )
    Allocation.objects.create(gpu=host.gpus.get(), reservation=reservation, period=period(start, 2))
    with pytest.raises(
        NoCapacity,
        match=r"every A100 is in use; the next one frees up at \d{4}-\d\d-\d\d \d\d:\d\d UTC",
    ):
        launch(alice, gpu_model=a100, gpu_count=1)


def test_on_demand_never_takes_a_gpu_booked_later(alice, a100, make_host, launch, sent, image):
    host = make_host("node1", a100, count=2)
    tomorrow = timezone.now() + timedelta(days=1)
    reservation = Reservation.objects.create(
        user=alice,
        plan=a100.plans.get(gpu_count=1),
        gpu_model=a100,
        gpu_count=1,
        image=image,
        period=period(tomorrow, 2),
        price=0,
    )
    Allocation.objects.create(
        gpu=host.gpus.get(index=0), reservation=reservation, period=period(tomorrow, 2)
    )
    instance = launch(alice, gpu_model=a100, gpu_count=1)
    assert instance.allocations.get().gpu.index == 1
    with pytest.raises(NoCapacity):
        launch(alice, gpu_model=a100, gpu_count=1)


def test_quota_counts_gpus_held_by_the_user(a100, make_host, sent, launch):
    make_host("node1", a100)
    dave = UserFactory(gpu_quota=3)
    launch(dave, gpu_model=a100, gpu_count=2)
    with pytest.raises(QuotaExceeded, match="your quota is 3 GPUs at once and you hold 2"):
        launch(dave, gpu_model=a100, gpu_count=2)
    launch(dave, gpu_model=a100, gpu_count=1)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"status": HostStatus.DRAINING}, "draining"),
        ({"status": HostStatus.MAINTENANCE}, "maintenance"),
        ({"last_heartbeat_at": timezone.now() - timedelta(minutes=5)}, "stale heartbeat"),
    ],
)
def test_unschedulable_hosts_take_no_new_launch(alice, a100, make_host, launch, fields, why):
    make_host("node1", a100, **fields)
    with pytest.raises(NoCapacity, match="no 1× A100 free on any host; every A100 is in use"):
        launch(alice, gpu_model=a100, gpu_count=1)


def test_multi_gpu_launch_prefers_nvlink_and_best_fit(alice, bob, a100, make_host, sent, launch):
    make_host("big", a100, count=8)
    small = make_host("small", a100, count=2)
    instance = launch(alice, gpu_model=a100, gpu_count=2)
    assert instance.host == small  # the whole 8-GPU host stays free for a large job


def test_model_cache_needs_a_host_that_has_one(alice, a100, make_host, sent, launch):
    make_host("node1", a100)
    with pytest.raises(RentalError, match="no shared Hugging Face model cache") as err:
        launch(alice, gpu_model=a100, gpu_count=1, mount_model_cache=True)
    assert err.value.field == "model_repo"
    assert not Allocation.objects.exists()


def test_model_cache_is_asked_for_but_its_path_is_never_sent(alice, a100, make_host, sent, launch):
    make_host("node1", a100, hf_cache_dir="/srv/hf")
    launch(alice, gpu_model=a100, gpu_count=1, mount_model_cache=True)
    assert sent[0]["spec"]["mount_model_cache"] is True
    assert "/srv/hf" not in str(sent[0])  # the agent mounts its own configured path
