"""Tenant network isolation, tried from inside a customer's container (real agent, real
Docker Engine): no other container, not the host's services, not a private-range host,
not the metadata address. The targets are this test's own: a listener on the host and a
test host in a network namespace it makes (10.213.7.2 and 169.254.169.254 there), each
reachable from the host itself, so the checks can fail."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import uuid

import pytest

from gpurental.agent.runtimes import network, sandboxes
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.testing.agent_process import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

PRIVATE, METADATA, PORT = "10.213.7.2", "169.254.169.254", 8765


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)  # noqa: S603


@pytest.fixture
def test_host():
    """A host of this test's own: a network namespace answering on PRIVATE and METADATA."""
    name = f"gprp-{uuid.uuid4().hex[:6]}"
    outer, inner = f"{name}a", f"{name}b"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        sh("ip", "link", "set", inner, "netns", name)
        sh("ip", "addr", "add", "10.213.7.1/24", "dev", outer)
        sh("ip", "addr", "add", "169.254.169.253/30", "dev", outer)
        sh("ip", "link", "set", outer, "up")
        run = ("ip", "netns", "exec", name)
        sh(*run, "ip", "addr", "add", f"{PRIVATE}/24", "dev", inner)
        sh(*run, "ip", "addr", "add", f"{METADATA}/30", "dev", inner)
        sh(*run, "ip", "link", "set", inner, "up")
        sh(*run, "ip", "link", "set", "lo", "up")
        sh(*run, "ip", "route", "add", "default", "via", "10.213.7.1")
        server = subprocess.Popen(  # noqa: S603
            [*run, "python3", "-m", "http.server", str(PORT), "--bind", "0.0.0.0"],  # noqa: S104
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: reachable(PRIVATE, PORT), 20, "the test host's listener")
            yield name
        finally:
            server.terminate()
            server.wait(10)
    finally:
        sh("ip", "link", "del", outer, check=False)
        sh("ip", "netns", "del", name, check=False)


@pytest.fixture
def host_listener():
    """A service on the host, on every address (like a careless exporter or a broker)."""
    server = socket.create_server(("0.0.0.0", 0))  # noqa: S104 - the point of the test
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join(5)
    server.close()


def reachable(address: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((address, port)) == 0


def reachable_from(container, address: str, port: int) -> bool:
    probe = (
        "import socket,sys; s=socket.socket(); s.settimeout(3); "
        f"sys.exit(0 if s.connect_ex(({address!r}, {port})) == 0 else 1)"
    )
    return container.exec_run(["python3", "-c", probe]).exit_code == 0


@pytest.fixture
def two_containers(agent, catalog, alice, bob, docker_client):
    model, image = catalog
    instances = [
        lc.instance_launch(user=user, image=image, gpu_model=model, gpu_count=1)
        for user in (alice, bob)
    ]
    for instance in instances:
        wait_for(
            lambda i=instance: Instance.objects.get(pk=i.pk).status == InstanceStatus.RUNNING,
            90,
            "the instance to run",
            agent,
        )
    return [docker_client.containers.get(f"gpurental-{i.pk}") for i in instances]


def ip_of(container) -> str:
    container.reload()
    if (sandbox := sandboxes.sandbox_of(container.attrs)) is not None:
        # It joined a network sandbox (sandboxes.py): the address is the sandbox's.
        container = container.client.containers.get(sandbox)
    return container.attrs["NetworkSettings"]["Networks"][network.NETWORK]["IPAddress"]


def test_containers_cannot_reach_each_other(two_containers):
    mine, theirs = two_containers
    # JupyterLab listens on 8888 in both; only their own published port is reachable.
    assert reachable(ip_of(theirs), 8888)  # from the host: it does answer
    assert not reachable_from(mine, ip_of(theirs), 8888)
    assert not reachable_from(theirs, ip_of(mine), 8888)


def test_containers_cannot_reach_the_hosts_services(two_containers, host_listener):
    mine, _ = two_containers
    gateway = mine.attrs["NetworkSettings"]["Networks"][network.NETWORK]["Gateway"]
    assert reachable(gateway, host_listener)
    assert not reachable_from(mine, gateway, host_listener)


def test_containers_cannot_reach_private_ranges_or_the_metadata_address(two_containers, test_host):
    mine, _ = two_containers
    for address in (PRIVATE, METADATA):
        assert reachable(address, PORT), f"{address} should answer the host itself"
        assert not reachable_from(mine, address, PORT), f"a container reached {address}"


def test_the_published_jupyterlab_port_still_answers(two_containers):
    mine, _ = two_containers
    port = mine.attrs["NetworkSettings"]["Ports"]["8888/tcp"][0]["HostPort"]
    assert reachable("127.0.0.1", int(port))


def test_container_logs_are_capped(two_containers):
    log_config = two_containers[0].attrs["HostConfig"]["LogConfig"]
    assert log_config == {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "3"}}


def test_a_workspace_over_the_plans_disk_is_noticed_then_stopped_and_kept(
    agent, catalog, alice, docker_client, settings
):
    """The plan's disk_gb on measured use (Docker's local volumes take no size limit here):
    the agent measures /workspace, the control plane notices and then stops it."""
    settings.DISK_GRACE_MINUTES = 0
    model, image = catalog
    plan = model.plans.get(gpu_count=1)
    plan.disk_gb = 1
    plan.save()
    instance = lc.instance_launch(user=alice, image=image, plan=plan)
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.RUNNING,
        90,
        "the instance to run",
        agent,
    )
    container = docker_client.containers.get(f"gpurental-{instance.pk}")
    fill = "import os; f = os.open('/workspace/big', os.O_CREAT | os.O_WRONLY); os.posix_fallocate(f, 0, 1200 * 2**20)"
    assert container.exec_run(["python3", "-c", fill]).exit_code == 0
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.STOPPED,
        60,
        "the instance to be stopped for its disk use",
        agent,
    )
    stopped = Instance.objects.get(pk=instance.pk)
    assert "over the limit" in stopped.status_reason and "/workspace kept" in stopped.status_reason
    assert stopped.events.filter(kind="notice", step="disk_over").exists()
    assert docker_client.volumes.get(f"gpurental-ws-{instance.pk}")


def test_from_another_host_only_the_published_port_answers(two_containers, test_host):
    """A host on the network (this test's own namespace, routed through this machine)
    reaches a container's JupyterLab port, and no other port it opens."""
    mine, _ = two_containers
    mine.exec_run(["python3", "-m", "http.server", "9999"], detach=True)
    wait_for(lambda: reachable(ip_of(mine), 9999), 20, "the container's extra listener")
    probe = ("ip", "netns", "exec", test_host, "python3", "-c")
    connect = (
        "import socket,sys; s=socket.socket(); s.settimeout(3); "
        "sys.exit(0 if s.connect_ex(({ip!r}, {port})) == 0 else 1)"
    )
    assert sh(*probe, connect.format(ip=ip_of(mine), port=8888), check=False).returncode == 0
    assert sh(*probe, connect.format(ip=ip_of(mine), port=9999), check=False).returncode == 1
