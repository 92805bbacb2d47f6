"""Three hosts for real: three agent processes, each in its own network namespace with its
own address, reaching the broker only over its own link, against one control plane and
one Docker Engine. Placement spreads, a reservation lands on its host, and a host whose
link goes down is unreachable, then running again with its files when the link returns.

Each "host" is a namespace ``gprh<i>-…`` with 10.214.<i>.2, linked by a veth pair to
10.214.<i>.1 in the root namespace, where the test forwards its broker and where Docker
publishes that host's JupyterLab ports. The rest of 10.214.0.0/16 is routed over the same
link (the root namespace's other link addresses, such as the object storage's forward on
10.214.1.1), never to another host's namespace.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid
from datetime import timedelta
from decimal import Decimal
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from gpurental.billing.services.credits import credit_add
from gpurental.fleet.models import Host
from gpurental.fleet.services import host_create
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services import reservations as rs
from gpurental.rentals.services.reconcile import fleet_reconcile
from gpurental.testing.agent_process import AgentProcess, wait_for
from gpurental.testing.tcp_proxy import TcpProxy
from tests.factories import PlanFactory
from tests.stack import remove_leftovers

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
S = InstanceStatus
HOSTS = 3
BROKER_PORT = 6390


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)  # noqa: S603


def broker_target() -> tuple[str | tuple[str, int], str]:
    """Where the test's Redis is, and the database path of its URL."""
    url = urlsplit(django_settings.REDIS_URL)
    if url.scheme == "unix":  # unix:///path/redis.sock?db=N: the broker's database too
        return url.path, "/" + dict(parse_qsl(url.query)).get("db", "0")
    return (url.hostname, url.port or 6379), url.path or "/0"


class NetnsHost:
    def __init__(self, index: int, suffix: str):
        self.index = index
        self.ns = f"gprh{index}-{suffix}"
        self.outer, self.inner = f"gprh{index}{suffix}a", f"gprh{index}{suffix}b"
        self.root_ip, self.own_ip = f"10.214.{index}.1", f"10.214.{index}.2"

    def up(self) -> None:
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        sh("ip", "link", "set", self.inner, "netns", self.ns)
        sh("ip", "addr", "add", f"{self.root_ip}/24", "dev", self.outer)
        sh("ip", "link", "set", self.outer, "up")
        run = ("ip", "netns", "exec", self.ns)
        sh(*run, "ip", "addr", "add", f"{self.own_ip}/24", "dev", self.inner)
        sh(*run, "ip", "link", "set", self.inner, "up")
        sh(*run, "ip", "link", "set", "lo", "up")
        sh(*run, "ip", "route", "add", "10.214.0.0/16", "via", self.root_ip)

    def link(self, state: str) -> None:
        sh("ip", "link", "set", self.outer, state)

    def down(self) -> None:
        sh("ip", "link", "del", self.outer, check=False)
        sh("ip", "netns", "del", self.ns, check=False)


@pytest.fixture
def fleet(control_worker, docker_client, catalog, tmp_path):
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is not installed")
    suffix = uuid.uuid4().hex[:4]
    target, db = broker_target()
    started: list[tuple[NetnsHost, AgentProcess, TcpProxy]] = []
    try:
        for index in range(1, HOSTS + 1):
            netns = NetnsHost(index, suffix)
            netns.up()
            proxy = TcpProxy((netns.root_ip, BROKER_PORT), target).start()
            host, token = host_create(name=f"h{index}-{suffix}", address=netns.root_ip)
            agent = AgentProcess(
                broker_url=f"redis://{netns.root_ip}:{BROKER_PORT}{db}",
                host_name=host.name,
                token=token,
                log_path=tmp_path / f"agent-{index}.log",
                prefix=("ip", "netns", "exec", netns.ns),
                GPURENTAL_BIND_ADDRESS=netns.root_ip,
                GPURENTAL_TELEMETRY_URL="off",
            )
            agent.host, agent.netns = host, netns
            agent.start()
            started.append((netns, agent, proxy))
        for _, agent, _ in started:
            wait_for(
                lambda a=agent: Host.objects.get(pk=a.host.pk).gpus.count() == 2,
                60,
                f"{agent.host.name}'s first heartbeat",
                agent,
            )
        yield [agent for _, agent, _ in started]
    finally:
        for netns, agent, proxy in started:
            agent.stop()
            proxy.close()
            netns.down()
            remove_leftovers(docker_client, agent.host.name)


@pytest.fixture
def fleet_snapshots(fleet, snapshots_on, settings):
    """The test object storage (moto, on 127.0.0.1) forwarded on 10.214.1.1, which every
    host reaches over its own link; the control plane presigns URLs for that address."""
    target = urlsplit(snapshots_on["endpoint"])
    proxy = TcpProxy((fleet[0].netns.root_ip, 0), (target.hostname, target.port)).start()
    host, port = proxy.address
    settings.SNAPSHOT_S3_ENDPOINT_URL = f"http://{host}:{port}"
    yield proxy
    proxy.close()


def wait_status(instance, status, agents, timeout=90) -> Instance:
    logs = "\n".join(a.log() for a in agents)

    class Logs:
        def log(self):
            return logs

    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == status,
        timeout,
        f"instance {status}",
        Logs(),
    )
    return Instance.objects.select_related("host").get(pk=instance.pk)


def jupyter(instance, path, method="GET", body=None):
    request = urllib.request.Request(
        f"http://{instance.host.address}:{instance.jupyter_port}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"token {instance.jupyter_token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - our own instance
        return response.status, response.read()


def test_three_hosts_in_their_own_namespaces(fleet, catalog, alice, bob, docker_client, settings):
    model, image = catalog
    settings.HOST_OFFLINE_AFTER = 3
    credit_add(user=alice, amount=Decimal("100.00"), description="test credit")
    two_gpus = PlanFactory(gpu_model=model, gpu_count=2, vcpus=1, memory_gb=1, slug="a10g-x2")

    # A reservation first: it lands on the host that holds its GPUs.
    start = timezone.now().replace(second=0, microsecond=0)
    booking = rs.reservation_book(
        user=alice, plan=two_gpus, image=image, start=start, end=start + timedelta(hours=1)
    )
    rs.reservations_tick(now=timezone.now())
    reserved = booking.instances.get()
    reserved_host = booking.allocations.first().gpu.host
    assert reserved.host_id == reserved_host.pk
    reserved = wait_status(reserved, S.RUNNING, fleet)

    # Two on-demand launches of a whole host each: placement spreads them over the others.
    launched = [lc.instance_launch(user=bob, image=image, plan=two_gpus) for _ in range(HOSTS - 1)]
    launched = [wait_status(i, S.RUNNING, fleet) for i in launched]
    assert len({i.host_id for i in [reserved, *launched]}) == HOSTS
    for instance in [reserved, *launched]:
        container = docker_client.containers.get(f"gpurental-{instance.pk}")
        assert container.labels["gpurental.host"] == instance.host.name
        assert jupyter(instance, "/api/status")[0] == 200

    # One host's link goes down: its instance becomes unreachable, the others run on.
    victim = launched[0]
    body = {"type": "file", "format": "text", "content": "kept across the cut"}
    assert jupyter(victim, "/api/contents/kept.txt", "PUT", body)[0] in (200, 201)
    agent = next(a for a in fleet if a.host.pk == victim.host_id)
    agent.netns.link("down")
    try:
        wait_for(
            lambda: (
                (
                    timezone.now() - Host.objects.get(pk=victim.host_id).last_heartbeat_at
                ).total_seconds()
                > settings.HOST_OFFLINE_AFTER + 1
            ),
            30,
            "the host to fall silent",
        )
        fleet_reconcile()
        assert Instance.objects.get(pk=victim.pk).status == S.UNREACHABLE
        others = Instance.objects.filter(pk__in=[reserved.pk, launched[1].pk])
        assert set(others.values_list("status", flat=True)) == {S.RUNNING}
    finally:
        agent.netns.link("up")
    victim = wait_status(victim, S.RUNNING, fleet, timeout=120)
    status, raw = jupyter(victim, "/api/contents/kept.txt?content=1")
    assert status == 200 and json.loads(raw)["content"] == "kept across the cut"
    assert victim.allocations.filter(period__upper_inf=True).count() == 2


def test_an_own_image_saved_on_one_host_runs_on_another_with_a_volume_that_outlives_both(
    fleet,
    fleet_snapshots,
    catalog,
    alice,
    registry,
    platform_registry,
    jupyter_in_registry,
    docker_client,
    settings,
    tmp_path,
):
    """Issue 30's "done when": a customer pushes their own image and launches it with its
    GPUs; as root in it, installs a package; saves it; launches the saved image on a second
    host with a volume; the volume's data survives terminating both instances. Then both
    the first instance's /workspace and the volume move to the third host through the
    object storage (snapshots, each host uploading or downloading over its own link)."""
    from gpurental.images.models import SavedImage
    from gpurental.images.services import registry_credential_save
    from gpurental.rentals.services.saving import image_save_request
    from gpurental.volumes.models import Snapshot, Volume
    from gpurental.volumes.services import volume_create
    from gpurental.volumes.snapshots import (
        snapshot_create,
        volume_restore,
        workspace_snapshot_create,
    )
    from tests.agent.test_root_in_container import a_deb, put, run
    from tests.stack import REGISTRY_USERS

    def ready(snapshot):
        wait_for(lambda: Snapshot.objects.get(pk=snapshot.pk).status != "saving", 60, "a snapshot")
        snapshot.refresh_from_db()
        assert snapshot.status == "ready", snapshot.status_reason
        return snapshot

    model, template = catalog
    settings.CUSTOM_IMAGE_TEMPLATE = template.slug
    registry_credential_save(
        account=alice,
        registry=registry.address,
        username="alice",
        password=REGISTRY_USERS["alice"],
        actor=alice,
    )
    first = lc.instance_launch(
        user=alice, image=template, image_ref=jupyter_in_registry, gpu_model=model, gpu_count=1
    )
    first = wait_status(first, S.RUNNING, fleet)
    container = docker_client.containers.get(f"gpurental-{first.pk}")
    assert container.image.id == docker_client.images.get(jupyter_in_registry).id
    env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] in ("0", "1")  # its GPU (simulated hosts name it)
    assert run(container, "id -u")[1] == "0"
    put(container, a_deb(tmp_path))
    assert run(container, "apt-get install -y /tmp/hello-gpr.deb")[0] == 0
    assert run(container, "echo notes > /workspace/notes.txt")[0] == 0

    saved = image_save_request(instance=first, name="with-hello", actor=alice)
    wait_for(
        lambda: SavedImage.objects.get(pk=saved.pk).status in ("ready", "failed"),
        120,
        "the image to be saved and pushed",
    )
    saved.refresh_from_db()
    assert saved.status == "ready", saved.status_reason

    other_host = next(a.host for a in fleet if a.host.pk != first.host_id)
    volume = volume_create(account=alice, name="results", size_gb=1, host=other_host, actor=alice)
    second = lc.instance_launch(
        user=alice,
        image=saved.template,
        image_ref=saved.reference,
        gpu_model=model,
        gpu_count=1,
        volumes=[("results", "/data")],
    )
    second = wait_status(second, S.RUNNING, fleet)
    assert second.host_id == other_host.pk != first.host_id
    container = docker_client.containers.get(f"gpurental-{second.pk}")
    assert run(container, "hello-gpr") == (0, "hello from a package")  # in the saved image
    assert run(container, "echo trained > /data/result.txt")[0] == 0

    # The first stops; its /workspace goes to the object storage from its host.
    lc.instance_stop(instance=first, actor=alice)
    wait_status(first, S.STOPPED, fleet)
    workspace = workspace_snapshot_create(instance=first, name="first-ws", actor=alice)
    ready(workspace)  # until then, the instance is not terminated (its files are read)
    for instance in (first, second):
        lc.instance_terminate(instance=instance, actor=alice)
    for instance in (first, second):
        wait_status(instance, S.TERMINATED, fleet)

    # Both gone; the volume and its data are not: snapshotted from its host, restored on
    # the third, where a new instance starts with both the volume and the /workspace.
    results = ready(snapshot_create(volume=volume, name="results-1", actor=alice))
    third_host = next(a.host for a in fleet if a.host.pk not in (first.host_id, other_host.pk))
    copy = volume_restore(snapshot=results, host=third_host, name="results-3", actor=alice)
    wait_for(
        lambda: Volume.objects.get(pk=copy.pk).status != "restoring", 60, "the volume's restore"
    )
    copy.refresh_from_db()
    assert copy.status == "available", copy.status_reason
    third = lc.instance_launch(
        user=alice,
        image=template,
        gpu_model=model,
        gpu_count=1,
        volumes=[(str(copy.pk), "/results")],
        workspace_from=workspace,
    )
    third = wait_status(third, S.RUNNING, fleet)
    assert third.host_id == third_host.pk
    container = docker_client.containers.get(f"gpurental-{third.pk}")
    assert run(container, "cat /results/result.txt") == (0, "trained")
    assert run(container, "cat /workspace/notes.txt") == (0, "notes")
    lc.instance_terminate(instance=third, actor=alice)


@pytest.mark.failover
def test_a_lost_hosts_auto_recover_instance_runs_on_another_with_its_snapshots_files(
    fleet, fleet_snapshots, catalog, alice, docker_client, settings
):
    """Issue 31, item 4: a customer marks an instance auto_recover and snapshots its
    /workspace; its host is pulled (the agent gone, the host silent past HOST_LOST_AFTER);
    the instance is relaunched on another host, where the snapshot's files are."""
    from gpurental.volumes.models import Snapshot
    from gpurental.volumes.snapshots import workspace_snapshot_create
    from tests.agent.test_root_in_container import run

    model, template = catalog
    first = lc.instance_launch(
        user=alice, image=template, gpu_model=model, gpu_count=1, auto_recover=True
    )
    first = wait_status(first, S.RUNNING, fleet)
    container = docker_client.containers.get(f"gpurental-{first.pk}")
    assert run(container, "echo weights-epoch-3 > /workspace/model.txt")[0] == 0
    lc.instance_stop(instance=first, actor=alice)
    wait_status(first, S.STOPPED, fleet)
    snapshot = workspace_snapshot_create(instance=first, name="nightly", actor=alice)
    wait_for(lambda: Snapshot.objects.get(pk=snapshot.pk).status != "saving", 60, "a snapshot")
    assert Snapshot.objects.get(pk=snapshot.pk).status == "ready"
    lc.instance_start(instance=first, actor=alice)
    first = wait_status(first, S.RUNNING, fleet)

    # Pull its host: the agent is gone; the others keep heart-beating every 5 s.
    pulled = next(a for a in fleet if a.host.pk == first.host_id)
    pulled.stop()
    settings.HOST_OFFLINE_AFTER, settings.HOST_LOST_AFTER = 12, 15
    wait_for(
        lambda: fleet_reconcile() or Instance.objects.get(pk=first.pk).status == S.LOST,
        60,
        "its host to be declared lost",
    )
    new = Instance.objects.get(recovered_from=first)
    new = wait_status(new, S.RUNNING, [a for a in fleet if a is not pulled])
    assert new.host_id != first.host_id and new.auto_recover
    assert new.workspace_from_id == snapshot.pk
    container = docker_client.containers.get(f"gpurental-{new.pk}")
    assert run(container, "cat /workspace/model.txt") == (0, "weights-epoch-3")
    assert Instance.objects.get(pk=first.pk).status == S.LOST  # its files wait on its host
    assert all(
        h.status == "active" for h in Host.objects.exclude(pk=first.host_id)
    )  # only the pulled host was lost
    lc.instance_terminate(instance=new, actor=alice)
    wait_status(new, S.TERMINATED, [a for a in fleet if a is not pulled])
