"""An account's private network, tried from inside its containers (real agent, real Docker
Engine): its instances reach each other by name and run the article's network test (ping,
iperf3); another account's instance reaches neither of them, nor they it; the host's own
services stay out of reach; the bridge goes with its last container."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpurental.agent.runtimes import sandboxes
from gpurental.catalog.models import ImageTemplate
from gpurental.networks.models import PrivateNetwork
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.clusters import cluster_launch
from gpurental.testing.agent_process import wait_for
from tests.agent.test_tenant_isolation import host_listener, reachable, reachable_from  # noqa: F401
from tests.stack import agent_on_a_new_host, remove_leftovers

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
TORCH_CPU_IMAGE = "gpurental/pytorch:2.13.0-cpu"


@pytest.fixture
def agent4(control_worker, docker_client, catalog, tmp_path):
    agent = agent_on_a_new_host(tmp_path, gpus=4)
    yield agent
    agent.kill()
    remove_leftovers(docker_client, agent.host.name)


def run(agent, catalog, user, name):
    model, image = catalog
    instance = lc.instance_launch(user=user, image=image, gpu_model=model, gpu_count=1, name=name)
    return instance


def running(agent, docker_client, *instances):
    for instance in instances:
        wait_for(
            lambda i=instance: Instance.objects.get(pk=i.pk).status == InstanceStatus.RUNNING,
            90,
            f"{instance.name} to run",
            agent,
        )
    return [docker_client.containers.get(f"gpurental-{i.pk}") for i in instances]


def private_ip(container, index: int) -> str:
    container.reload()
    if (sandbox := sandboxes.sandbox_of(container.attrs)) is not None:
        container = container.client.containers.get(sandbox)
    return container.attrs["NetworkSettings"]["Networks"][f"gpurental-private-{index}"]["IPAddress"]


def sh_in(container, command: str):
    return container.exec_run(["sh", "-c", command])


def test_an_accounts_instances_reach_each_other_by_name_and_no_one_else(
    agent4,
    catalog,
    alice,
    bob,
    docker_client,
    host_listener,  # noqa: F811
):
    a0, a1 = run(agent4, catalog, alice, "train-0"), run(agent4, catalog, alice, "train-1")
    b0 = run(agent4, catalog, bob, "other")
    c_a0, c_a1, c_b0 = running(agent4, docker_client, a0, a1, b0)
    alices = PrivateNetwork.objects.get(account=alice)
    bobs = PrivateNetwork.objects.get(account=bob)
    assert alices.subnet != bobs.subnet

    # The article's test, by name: ping, then iperf3 against a server on the other.
    ping = sh_in(c_a0, "ping -c 2 -W 2 train-1.internal")
    assert ping.exit_code == 0, ping.output.decode()
    assert sh_in(c_a0, f"getent hosts {a1.pk}.internal").exit_code == 0  # by id too
    assert sh_in(c_a1, "iperf3 -s -D -1").exit_code == 0
    iperf = wait_for(
        lambda: (r := sh_in(c_a0, "iperf3 -c train-1.internal -t 2 -J")).exit_code == 0 and r,
        20,
        "iperf3 between alice's instances",
        agent4,
    )
    sent = json.loads(iperf.output)["end"]["sum_received"]["bits_per_second"]
    assert sent > 10e6, sent  # a real transfer over the bridge, not an error page

    # Bob's instance: not by name, not by address; nor alice's to his.
    assert sh_in(c_b0, "getent hosts train-1.internal").exit_code != 0
    assert sh_in(c_b0, "ping -c 1 -W 2 " + private_ip(c_a1, alices.index)).exit_code != 0
    assert reachable(private_ip(c_a1, alices.index), 8888)  # the host does reach it
    assert not reachable_from(c_b0, private_ip(c_a1, alices.index), 8888)
    assert not reachable_from(c_a0, private_ip(c_b0, bobs.index), 8888)
    # The host's own services, through the private bridge's gateway: no.
    c_a0.reload()
    sandbox_or_self = docker_client.containers.get(sandboxes.sandbox_of(c_a0.attrs) or c_a0.id)
    gateway = sandbox_or_self.attrs["NetworkSettings"]["Networks"][
        f"gpurental-private-{alices.index}"
    ]["Gateway"]
    if gateway:  # an internal network may have no gateway address at all
        assert reachable(gateway, host_listener)
        assert not reachable_from(c_a0, gateway, host_listener)

    # The bridge goes with its last container.
    for instance in (a0, a1):
        lc.instance_terminate(instance=Instance.objects.get(pk=instance.pk), actor=alice)
    wait_for(
        lambda: not docker_client.networks.list(names=[f"gpurental-private-{alices.index}"]),
        60,
        "alice's private network to go with her last instance",
        agent4,
    )


def test_a_two_rank_cluster_all_reduces_with_gloo(agent4, catalog, alice, docker_client):
    """What torchrun needs, as the start spec sets it: each rank reaches rank 0 by name on
    the private network and a torch.distributed all-reduce (gloo, the CPU image) adds up."""
    model, _ = catalog
    torch_image = ImageTemplate.objects.create(
        slug="pytorch-2.13", name="PyTorch", image=TORCH_CPU_IMAGE, ssh_port=2222
    )
    ranks = cluster_launch(
        user=alice, image=torch_image, gpu_model=model, gpu_count=1, size=2, name="ddp"
    )
    containers = running(agent4, docker_client, *ranks)
    script = (
        "import os, torch, torch.distributed as d; d.init_process_group('gloo'); "
        "t = torch.tensor([float(os.environ['RANK']) + 1]); d.all_reduce(t); "
        "print('sum', int(t.item()), 'of', d.get_world_size(), os.environ['MASTER_ADDR'])"
    )
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: c.exec_run(["python", "-c", script]), containers))
    for result in results:
        assert result.exit_code == 0, result.output.decode()[-2000:]
        assert f"sum 3 of 2 {ranks[0].pk}.internal" in result.output.decode()
