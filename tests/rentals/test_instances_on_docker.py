"""The whole path for real: launch service → Celery → host agent process → Docker Engine
→ JupyterLab answering → reports back through the control queue.

The control worker runs in a thread of the test process (it needs the test database);
the agent is a separate process, exactly as on a GPU host, with no database access.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import pytest
from django.conf import settings as django_settings

from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from gpurental.testing.agent_process import wait_for
from tests.agent.conftest import JUPYTER_IMAGE
from tests.factories import ImageTemplateFactory
from tests.stack import READY_TIMEOUT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
S = InstanceStatus


def status_of(instance) -> str:
    return Instance.objects.get(pk=instance.pk).status


def wait_status(instance, status, agent, timeout=90):
    wait_for(lambda: status_of(instance) == status, timeout, f"instance to be {status}", agent)
    instance.refresh_from_db()
    return instance


def jupyter(instance, path, token=None, method="GET", body=None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{instance.jupyter_port}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
    )
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - our own local instance
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.backend
def test_launch_stop_start_terminate_on_a_real_docker_engine(agent, catalog, alice, docker_client):
    model, image = catalog
    instance = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    instance = wait_status(instance, S.RUNNING, agent)

    steps = list(instance.events.filter(kind="progress").values_list("step", flat=True))
    assert steps[0] == "queued" and steps[-1] == "running"
    assert {"creating", "waiting_for_jupyter"} <= set(steps)
    assert "pulling_image" not in steps  # the image is on the host: nothing is pulled

    token = instance.jupyter_token
    assert jupyter(instance, "/api/status", token)[0] == 200
    assert jupyter(instance, "/api/status")[0] == 403

    container = docker_client.containers.get(f"gpurental-{instance.pk}")
    host_config = container.attrs["HostConfig"]
    assert "no-new-privileges:true" in host_config["SecurityOpt"]
    assert host_config["CapDrop"] == ["ALL"]
    assert host_config["Privileged"] is False
    assert host_config["PidsLimit"] == django_settings.INSTANCE_PIDS_LIMIT
    assert host_config["Memory"] == 1024 * 1024 * 1024
    assert host_config["NanoCpus"] == 1_000_000_000
    assert all(b["HostIp"] == "127.0.0.1" for b in host_config["PortBindings"]["8888/tcp"])
    assert not any("docker.sock" in m.get("Source", "") for m in container.attrs["Mounts"])
    assert container.labels["gpurental.instance"] == str(instance.pk)
    gpu_index = instance.allocations.get().gpu.index
    assert f"NVIDIA_VISIBLE_DEVICES={gpu_index}" in container.attrs["Config"]["Env"]

    status, _ = jupyter(
        instance,
        "/api/contents/kept.txt",
        token,
        "PUT",
        {"type": "file", "format": "text", "content": "still here"},
    )
    assert status in (200, 201)

    lc.instance_stop(instance=instance, actor=alice)
    instance = wait_status(instance, S.STOPPED, agent)
    # The stopped container is kept (it can be saved as an image) until the next start.
    [kept] = docker_client.containers.list(
        all=True, filters={"label": f"gpurental.instance={instance.pk}"}, ignore_removed=True
    )
    assert kept.status == "exited"
    assert docker_client.volumes.get(f"gpurental-ws-{instance.pk}")
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()

    # No-GPU mode: the same workspace on the same host, with no GPU in the container.
    lc.instance_start(instance=instance, actor=alice, without_gpus=True)
    instance = wait_status(instance, S.RUNNING, agent)
    status, body = jupyter(instance, "/api/contents/kept.txt?content=1", instance.jupyter_token)
    assert status == 200 and json.loads(body)["content"] == "still here"
    container = docker_client.containers.get(f"gpurental-{instance.pk}")
    assert container.id != kept.id  # a new run: a fresh container from the image
    assert "NVIDIA_VISIBLE_DEVICES=void" in container.attrs["Config"]["Env"]
    assert not container.attrs["HostConfig"]["DeviceRequests"]
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()
    lc.instance_stop(instance=instance, actor=alice)
    instance = wait_status(instance, S.STOPPED, agent)

    lc.instance_start(instance=instance, actor=alice)
    instance = wait_status(instance, S.RUNNING, agent)
    status, body = jupyter(instance, "/api/contents/kept.txt?content=1", instance.jupyter_token)
    assert status == 200 and json.loads(body)["content"] == "still here"
    container = docker_client.containers.get(f"gpurental-{instance.pk}")
    gpu_index = instance.allocations.get(period__upper_inf=True).gpu.index
    assert f"NVIDIA_VISIBLE_DEVICES={gpu_index}" in container.attrs["Config"]["Env"]

    lc.instance_terminate(instance=instance, actor=alice)
    instance = wait_status(instance, S.TERMINATED, agent)
    assert not docker_client.containers.list(
        all=True, filters={"label": f"gpurental.instance={instance.pk}"}, ignore_removed=True
    )
    assert not docker_client.volumes.list(filters={"label": f"gpurental.instance={instance.pk}"})
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()


def test_container_removed_behind_the_platforms_back_is_noticed(
    agent, catalog, alice, docker_client
):
    model, image = catalog
    instance = wait_status(
        lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1), S.RUNNING, agent
    )
    time.sleep(2.5)  # let a heartbeat see it running first
    docker_client.containers.get(f"gpurental-{instance.pk}").remove(force=True)
    instance = wait_status(instance, S.STOPPED, agent, timeout=30)
    assert (
        "disappeared" in instance.status_reason and "outside the platform" in instance.status_reason
    )
    assert docker_client.volumes.get(f"gpurental-ws-{instance.pk}")  # /workspace kept
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()
    lc.instance_terminate(instance=instance, actor=alice)
    wait_status(instance, S.TERMINATED, agent)
    wait_for(
        lambda: (
            not docker_client.volumes.list(filters={"label": f"gpurental.instance={instance.pk}"})
        ),
        30,
        "the workspace volume to go",
        agent,
    )


def test_agent_killed_mid_launch_then_reconciliation_cleans_up(
    agent, catalog, alice, docker_client, settings
):
    settings.LAUNCH_TIMEOUT = 6
    model, image = catalog
    instance = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    label = {"label": f"gpurental.instance={instance.pk}"}
    wait_for(
        lambda: docker_client.containers.list(all=True, filters=label, ignore_removed=True),
        60,
        "the container to exist",
        agent,
    )
    agent.kill()  # mid-launch: the container exists, JupyterLab is not confirmed yet
    assert status_of(instance) in (S.PENDING, S.PROVISIONING)

    time.sleep(settings.LAUNCH_TIMEOUT + 1)
    fleet_reconcile()
    instance.refresh_from_db()
    assert instance.status == S.FAILED and "did not finish within" in instance.status_reason
    assert instance.running_since is None  # never running, so never billed
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()

    agent.start()  # the host comes back: the leftover container and volume must go
    wait_for(
        lambda: not docker_client.containers.list(all=True, filters=label, ignore_removed=True),
        60,
        "the orphan to be removed",
        agent,
    )
    wait_for(
        lambda: not docker_client.volumes.list(filters=label), 30, "the orphan volume to go", agent
    )


@pytest.mark.parametrize(
    ("image_fields", "reason"),
    [
        (
            {"image": "gpurental/does-not-exist:1"},
            "is not on this host and pulling is off; build it with `make images`",
        ),
        ({"command": ["sh", "-c", "echo boom >&2; exit 3"]}, "exit"),
        ({"command": ["sleep", "600"]}, "JupyterLab did not become ready on 127.0.0.1:"),
    ],
    ids=["missing-image", "container-exits", "jupyter-never-answers"],
)
def test_failed_launches_release_everything_and_charge_nothing(
    agent, catalog, alice, docker_client, image_fields, reason
):
    model, _ = catalog
    image = ImageTemplateFactory(
        slug=f"broken-{uuid.uuid4().hex[:6]}", **{"image": JUPYTER_IMAGE, **image_fields}
    )
    instance = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    instance = wait_status(instance, S.FAILED, agent, timeout=READY_TIMEOUT + 60)
    assert reason in instance.status_reason and "Nothing was charged" in instance.status_reason
    assert instance.running_since is None and instance.stopped_at is None
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()
    label = {"label": f"gpurental.instance={instance.pk}"}
    assert not docker_client.containers.list(all=True, filters=label, ignore_removed=True)
    wait_for(
        lambda: not docker_client.volumes.list(filters=label),
        30,
        "the workspace volume to go",
        agent,
    )
