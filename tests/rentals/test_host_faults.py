"""Hosts come and go, nothing is lost: each fault for real, on a real Docker Engine with a
real agent process, checking the file in /workspace, the instance's state, the charges
and the GPUs held.

The reconcile periods are shortened (HOST_OFFLINE_AFTER 3 s, HOST_LOST_AFTER 8 s) and the
reconcile pass is run by the test, where beat would run it every RECONCILE_INTERVAL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime

import pytest
from django.utils import timezone

from gpurental.billing.models import Charge
from gpurental.billing.services.metering import meter_run
from gpurental.fleet.models import Host, HostStatus
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from gpurental.testing import pytest_plugin
from gpurental.testing.agent_process import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
S = InstanceStatus
OFFLINE_AFTER = 3
LOST_AFTER = 8


@pytest.fixture(autouse=True)
def short_host_timeouts(settings):
    settings.HOST_OFFLINE_AFTER = OFFLINE_AFTER
    settings.HOST_LOST_AFTER = LOST_AFTER


def fresh(instance) -> Instance:
    return Instance.objects.select_related("host").get(pk=instance.pk)


def wait_status(instance, status, agent, timeout=90) -> Instance:
    wait_for(lambda: fresh(instance).status == status, timeout, f"instance {status}", agent)
    return fresh(instance)


def jupyter(instance, path, method="GET", body=None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{instance.jupyter_port}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"token {instance.jupyter_token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - local instance
            return response.status, response.read()
    except (urllib.error.URLError, OSError) as exc:
        return getattr(exc, "code", 0), b""


def write_file(instance, text="the customer's work") -> None:
    body = {"type": "file", "format": "text", "content": text}
    assert jupyter(instance, "/api/contents/kept.txt", "PUT", body)[0] in (200, 201)


def read_file(instance) -> str:
    status, body = jupyter(instance, "/api/contents/kept.txt?content=1")
    assert status == 200, f"JupyterLab answered {status}"
    return json.loads(body)["content"]


def gpus_held(instance) -> int:
    return Allocation.objects.filter(instance=instance, period__upper_inf=True).count()


def charged_inside(instance, start: datetime, end: datetime) -> list:
    """Charges that bill any of the time between ``start`` and ``end``."""
    return list(
        Charge.objects.filter(instance=instance, period_start__lt=end, period_end__gt=start)
    )


def silent_since(host) -> float:
    return (timezone.now() - Host.objects.get(pk=host.pk).last_heartbeat_at).total_seconds()


def wait_silent(agent, seconds: float) -> datetime:
    """Wait until the agent's host has been silent ``seconds``; returns its last beat."""
    wait_for(lambda: silent_since(agent.host) > seconds, seconds + 30, "the host to be silent")
    return Host.objects.get(pk=agent.host.pk).last_heartbeat_at


@pytest.fixture
def running(agent, catalog, alice):
    model, image = catalog
    instance = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    instance = wait_status(instance, S.RUNNING, agent)
    write_file(instance)
    return instance


def assert_back_running_with_the_gap_unbilled(instance, agent, last_beat):
    instance = wait_status(instance, S.RUNNING, agent, timeout=60)
    assert read_file(instance) == "the customer's work"
    assert gpus_held(instance) == 1
    back = instance.running_since
    assert back > last_beat
    timeline = instance.events.filter(kind="transition").values_list("to_status", flat=True)
    assert list(timeline)[-2:] == [S.UNREACHABLE, S.RUNNING]
    meter_run(now=timezone.now())
    assert not charged_inside(instance, last_beat, back)
    meter_run(now=timezone.now())
    ends = list(Charge.objects.filter(instance=instance).values_list("period_start", flat=True))
    assert len(ends) == len(set(ends))  # nothing billed twice
    return instance


def test_agent_paused_past_the_offline_time_comes_back_running_with_its_files(agent, running):
    agent.pause()
    last_beat = wait_silent(agent, OFFLINE_AFTER + 0.5)
    fleet_reconcile()
    instance = fresh(running)
    assert instance.status == S.UNREACHABLE
    assert instance.stopped_at == last_beat  # billing stopped at the last heartbeat
    assert gpus_held(instance) == 1  # the GPUs stay held
    assert Host.objects.get(pk=agent.host.pk).status == HostStatus.OFFLINE
    assert read_file(instance) == "the customer's work"  # the container itself never stopped

    agent.resume()
    assert_back_running_with_the_gap_unbilled(instance, agent, last_beat)


def test_agent_paused_past_the_lost_time_stops_its_container_and_keeps_the_workspace(
    agent, running, alice, docker_client
):
    agent.pause()
    last_beat = wait_silent(agent, OFFLINE_AFTER + 0.5)
    fleet_reconcile()
    assert fresh(running).status == S.UNREACHABLE
    wait_silent(agent, LOST_AFTER + 0.5)
    fleet_reconcile()
    instance = fresh(running)
    assert instance.status == S.LOST
    assert gpus_held(instance) == 0  # released to others
    assert instance.stopped_at == last_beat

    agent.resume()
    instance = wait_status(instance, S.STOPPED, agent, timeout=60)
    assert "/workspace kept" in instance.status_reason
    label = {"label": f"gpurental.instance={instance.pk}"}
    wait_for(
        lambda: (
            not docker_client.containers.list(filters=label, ignore_removed=True)
        ),  # running ones only
        60,
        "the leftover container to be stopped",
        agent,
    )
    assert docker_client.volumes.list(filters=label), "the workspace volume was removed"
    meter_run(now=timezone.now())
    assert not charged_inside(instance, last_beat, timezone.now())

    lc.instance_start(instance=instance, actor=alice)
    instance = wait_status(instance, S.RUNNING, agent)
    assert read_file(instance) == "the customer's work"
    assert gpus_held(instance) == 1


def test_agent_killed_and_restarted_finds_its_instances_running(agent, running):
    agent.kill()
    last_beat = wait_silent(agent, OFFLINE_AFTER + 0.5)
    fleet_reconcile()
    instance = fresh(running)
    assert instance.status == S.UNREACHABLE and gpus_held(instance) == 1
    agent.start()
    assert_back_running_with_the_gap_unbilled(instance, agent, last_beat)


def _dockerd_pid() -> int:
    out = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True, check=False)
    pids = out.stdout.split()
    if len(pids) != 1:
        pytest.skip(f"expected one dockerd, found {pids or 'none'}")
    return int(pids[0])


def _engine_answers(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure means "not answering"
        return False


@pytest.mark.exclusive
def test_dockerd_restarted_keeps_the_host_alive_and_the_workspace(
    agent, running, alice, docker_client
):
    """The heartbeat does not wait on Docker: the host stays online while the engine is
    down. The engine's restart stops the container; the instance becomes stopped with its
    /workspace, and starts again."""
    pid = _dockerd_pid()
    os.kill(pid, signal.SIGTERM)
    try:
        wait_for(lambda: not _engine_answers(docker_client), 60, "dockerd to stop")
        time.sleep(OFFLINE_AFTER + 1)  # longer than a host may be silent
        assert silent_since(agent.host) < OFFLINE_AFTER, "the heartbeat waited on Docker"
        fleet_reconcile()
        assert fresh(running).status == S.RUNNING
    finally:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        subprocess.run([os.path.join(root, "scripts", "docker-engine.sh")], check=True)  # noqa: S603
    instance = wait_status(running, S.STOPPED, agent, timeout=60)
    assert "outside the platform" in instance.status_reason
    assert "/workspace kept" in instance.status_reason
    assert gpus_held(instance) == 0
    stopped = instance.stopped_at
    meter_run(now=timezone.now())
    assert not charged_inside(instance, stopped, timezone.now())

    lc.instance_start(instance=instance, actor=alice)
    instance = wait_status(instance, S.RUNNING, agent)
    assert read_file(instance) == "the customer's work"


@pytest.mark.exclusive
def test_redis_restarted_converges_with_nothing_lost(agent, running):
    """The broker (and cache) restarts: agent and control worker reconnect, the beats
    resume, the instance keeps running with its file."""
    restarted_at = timezone.now()
    if not pytest_plugin.embedded_redis_restart():
        pytest.skip("restarts only the embedded Redis this run started (REDIS_URL is external)")
    wait_for(
        lambda: Host.objects.get(pk=agent.host.pk).last_heartbeat_at > restarted_at,
        60,
        "heartbeats after the restart",
        agent,
    )
    fleet_reconcile()
    instance = fresh(running)
    assert instance.status == S.RUNNING
    assert read_file(instance) == "the customer's work"
    assert gpus_held(instance) == 1
    assert not instance.events.filter(to_status__in=(S.UNREACHABLE, S.LOST, S.STOPPED)).exists()
    meter_run(now=timezone.now())
    meter_run(now=timezone.now())
    starts = list(Charge.objects.filter(instance=instance).values_list("period_start", flat=True))
    assert len(starts) == len(set(starts))  # nothing billed twice
    # The agent still takes commands after the restart.
    lc.instance_stop(instance=instance)
    wait_status(instance, S.STOPPED, agent, timeout=60)
