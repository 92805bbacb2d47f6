"""Heartbeats: token checked, inventory synced, containers reconciled."""

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.accounts.models import AuditEvent
from gpurental.fleet.hostlink import MessageRefused
from gpurental.fleet.models import HostStatus
from gpurental.fleet.services import host_heartbeat_receive
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from tests.messages import signed

S = InstanceStatus


def beat(host, token=None, *, inventory=None, containers=None, sent_at=None, now=None):
    now = now or timezone.now()
    sent_at = sent_at if sent_at is not None else now.timestamp()
    message = signed(
        host,
        token,
        inventory=inventory if inventory is not None else [],
        containers=containers or {},
        containers_listed_at=sent_at,
        runtime="docker",
        gpu_source="simulated",
        agent_version="test",
        sent_at=sent_at,
    )
    return host_heartbeat_receive(message=message, now=now)


def test_a_heartbeat_signed_with_a_wrong_token_is_refused_and_recorded_once_a_minute(
    a100, make_host
):
    host = make_host("node1", a100)
    for _ in range(3):
        with pytest.raises(MessageRefused, match="bad signature"):
            beat(host, token="forged")
    assert (
        AuditEvent.objects.filter(action="host.heartbeat_refused", object_repr="node1").count() == 1
    )


def test_unknown_host_is_refused(db):
    class Ghost:
        name, token = "ghost", "x"

    with pytest.raises(MessageRefused, match="no host of that name"):
        beat(Ghost)


def test_heartbeat_brings_an_offline_host_back(a100, make_host):
    host = make_host(
        "node1",
        a100,
        status=HostStatus.OFFLINE,
        last_heartbeat_at=timezone.now() - timedelta(hours=1),
    )
    beat(host)
    host.refresh_from_db()
    assert host.status == HostStatus.ACTIVE and host.runtime == "docker"
    assert AuditEvent.objects.filter(action="host.online", object_id=str(host.pk)).exists()


def test_inventory_creates_and_updates_gpus(a100, make_host):
    host = make_host("node1", a100, count=1)
    inventory = [
        {
            "index": i,
            "uuid": f"GPU-real-{i}",
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_mb": 81920,
            "nvlink_peers": [j for j in range(4) if j != i],
        }
        for i in range(4)
    ]
    beat(host, inventory=inventory)
    gpus = list(host.gpus.order_by("index").values_list("index", "uuid", "nvlink_peers"))
    assert gpus == [(i, f"GPU-real-{i}", [j for j in range(4) if j != i]) for i in range(4)]
    beat(host, inventory=inventory[:3])
    assert not host.gpus.get(index=3).is_enabled


def test_a_steady_heartbeat_costs_the_same_queries_for_one_gpu_or_eight(
    a100, make_host, django_assert_num_queries
):
    """The control worker reads a host's GPUs once per beat, never a query per GPU."""

    def inventory(host, count):
        return [
            {
                "index": i,
                "uuid": f"GPU-{host.name}-{i}",
                "name": "NVIDIA A100-SXM4-80GB",
                "memory_mb": 81920,
            }
            for i in range(count)
        ]

    small, big = make_host("small", a100, count=0), make_host("big", a100, count=0)
    beat(small, inventory=inventory(small, 1))
    beat(big, inventory=inventory(big, 8))  # first beats create the GPU rows
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        beat(small, inventory=inventory(small, 1))

    with django_assert_num_queries(len(one)):
        beat(big, inventory=inventory(big, 8))
    assert not any('UPDATE "fleet_gpu"' in q["sql"] for q in one.captured_queries)


def test_running_instance_whose_container_vanished_is_stopped_and_frees_gpus(
    alice, a100, make_host, image, sent, django_capture_on_commit_callbacks
):
    host = make_host("node1", a100)
    with django_capture_on_commit_callbacks(execute=True):
        instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
        lc.instance_report_running(
            instance_id=str(instance.pk),
            port=4000,
            container_id="c1",
            now=timezone.now() - timedelta(seconds=30),
        )
    with django_capture_on_commit_callbacks(execute=True):
        beat(host, containers={})
    instance.refresh_from_db()
    assert instance.status == S.STOPPED and "disappeared" in instance.status_reason
    assert instance.stopped_at is not None
    assert not instance.allocations.filter(period__upper_inf=True).exists()
    assert sent[-1]["task"] == "instance_stop"  # the workspace stays until terminate


def test_a_heartbeat_older_than_a_transition_does_not_undo_it(alice, a100, make_host, image, sent):
    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    lc.instance_report_running(instance_id=str(instance.pk), port=4000, container_id="c1")
    beat(host, containers={}, sent_at=time.time() - 1)
    instance.refresh_from_db()
    assert instance.status == S.RUNNING


def test_containers_of_unknown_instances_are_stopped_never_removed(
    a100, make_host, sent, django_capture_on_commit_callbacks
):
    host = make_host("node1", a100)
    orphan = str(uuid.uuid4())
    with django_capture_on_commit_callbacks(execute=True):
        beat(host, containers={orphan: "running"})
    assert sent == [
        {
            "task": "instance_stop",
            "queue": "host.node1",
            "instance_id": orphan,
            "keep_container": True,
        }
    ]
