"""Network sandboxes made ahead of launches (runtimes/sandboxes.py), on the real Docker
Engine with the real instance image: a start joins an idle sandbox, answers on the port
the sandbox publishes, stays isolated on the tenant network, and its sandbox goes with it."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid

import docker.errors
import pytest
import requests
from docker.models.containers import ContainerCollection

from gpurental.agent.runtimes import network, sandboxes
from gpurental.agent.runtimes.base import ignore_progress
from gpurental.agent.runtimes.docker import DockerRuntime, container_name
from gpurental.testing.agent_process import wait_for

pytestmark = pytest.mark.docker


@pytest.fixture
def runtime(docker_runtime):
    """A runtime of its own host name with one idle sandbox kept ready, its firewall set."""
    runtime = DockerRuntime(
        client=docker_runtime.client,
        ready_timeout_s=60,
        host_name=f"sbx-{uuid.uuid4().hex[:8]}",
        sandbox_pool=1,
    )
    runtime.prepare_host()
    started: list[str] = []
    runtime.started = started
    yield runtime
    for instance_id in started:
        runtime.remove(instance_id)
    runtime.close()
    assert not sandboxes_of(runtime), "a sandbox outlived its runtime"


def sandboxes_of(runtime) -> list:
    label = {"label": [sandboxes.LABEL_SANDBOX, f"gpurental.host={runtime.host_name}"]}
    return runtime.client.containers.list(all=True, filters=label, ignore_removed=True)


def start(runtime, spec, progress=ignore_progress):
    runtime.started.append(spec.instance_id)
    return runtime.start(spec, progress)


def warm(runtime, spec_like) -> None:
    """Launch once (no sandbox yet for these ports), then wait for the pool to fill."""
    start(runtime, spec_like)
    wait_for(lambda: runtime.sandboxes.idle_count() == 1, 60, "an idle sandbox")


def inspect(runtime, name: str) -> dict:
    return runtime.client.api.inspect_container(name)


def exists(runtime, name: str) -> bool:
    try:
        runtime.client.api.inspect_container(name)
    except docker.errors.NotFound:
        return False
    return True


def jupyter_status(started, token: str | None) -> int:
    headers = {"Authorization": f"token {token}"} if token else {}
    url = f"http://{started.host}:{started.port}/api/status"
    return requests.get(url, headers=headers, timeout=5).status_code


def test_the_first_start_makes_its_own_network_then_the_next_joins_a_sandbox(runtime, make_spec):
    first = make_spec()
    warm(runtime, first)
    assert inspect(runtime, container_name(first.instance_id))["HostConfig"]["NetworkMode"] == (
        network.NETWORK
    )

    spec = make_spec()
    started = start(runtime, spec)

    container = inspect(runtime, container_name(spec.instance_id))
    sandbox = inspect(runtime, sandboxes.sandbox_name(spec.instance_id))
    assert container["HostConfig"]["NetworkMode"] == f"container:{sandbox['Id']}"
    assert not container["HostConfig"]["PortBindings"]  # the sandbox publishes them
    published = sandbox["NetworkSettings"]["Ports"]["8888/tcp"]
    assert published == [{"HostIp": "127.0.0.1", "HostPort": str(started.port)}]
    assert list(sandbox["NetworkSettings"]["Networks"]) == [network.NETWORK]
    assert jupyter_status(started, spec.token) == 200
    assert jupyter_status(started, None) == 403
    # The instance's own limits and hardening are unchanged.
    assert container["HostConfig"]["CapDrop"] == ["ALL"]
    assert container["HostConfig"]["PidsLimit"] == 256
    # The pool makes the next one once this start is over.
    wait_for(lambda: runtime.sandboxes.idle_count() == 1, 60, "the pool refilled")
    assert runtime.sandboxes.made == 2


def test_a_sandbox_is_hardened_and_only_sleeps(runtime, make_spec):
    warm(runtime, make_spec())
    [idle] = [s for s in sandboxes_of(runtime) if s.name.startswith(sandboxes.POOL_PREFIX)]
    attrs = inspect(runtime, idle.id)
    host = attrs["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["PidsLimit"] == 8
    assert attrs["Config"]["Entrypoint"] == ["sleep", "infinity"]
    # It keeps nothing: a stop (the engine's own shutdown too) kills it at once rather than
    # wait out the timeout that sleep, as PID 1, would make it take.
    assert attrs["Config"]["StopSignal"] == "SIGKILL"
    assert not attrs["Config"]["Env"] or not any(
        e.startswith("JUPYTER_TOKEN") for e in attrs["Config"]["Env"]
    )
    assert attrs["Config"]["User"] == "65534:65534"  # nobody: it only sleeps


def test_removing_or_stopping_an_instance_removes_its_sandbox(runtime, make_spec):
    warm(runtime, make_spec())
    spec = make_spec()
    start(runtime, spec)
    name = sandboxes.sandbox_name(spec.instance_id)
    assert exists(runtime, name)

    runtime.stop(spec.instance_id)

    assert not exists(runtime, name)
    assert not exists(runtime, container_name(spec.instance_id))
    assert runtime.list_instances()[spec.instance_id] == "stopped"


def test_a_stop_that_keeps_the_container_drops_its_sandbox_and_the_next_run_replaces_it(
    runtime, make_spec
):
    warm(runtime, make_spec())
    spec = make_spec()
    started = start(runtime, spec)

    runtime.stop(spec.instance_id, keep_container=True)  # kept to be saved as an image

    assert not exists(runtime, sandboxes.sandbox_name(spec.instance_id))
    assert runtime.list_instances()[spec.instance_id] == "exited"
    steps: list[str] = []
    again = runtime.start(make_spec(instance_id=spec.instance_id), steps.append)  # a new run
    assert again.container_id != started.container_id
    assert any("replacing the stopped container" in step for step in steps)


def test_a_parked_container_keeps_its_sandbox_and_starts_again_in_it(runtime, make_spec):
    warm(runtime, make_spec())
    spec = make_spec()
    started = start(runtime, spec)

    runtime.stop(spec.instance_id, keep_container=True, park=True)
    assert exists(runtime, sandboxes.sandbox_name(spec.instance_id))
    # As after a reboot: the sandbox is stopped too; the kept container's start starts it.
    runtime.client.api.stop(sandboxes.sandbox_name(spec.instance_id), timeout=0)

    steps: list[str] = []
    again = runtime.start(spec, steps.append)

    assert again.container_id == started.container_id
    assert any("kept container" in step for step in steps)
    assert jupyter_status(again, spec.token) == 200


def test_a_dead_sandbox_falls_back_to_the_containers_own_network(runtime, make_spec):
    warm(runtime, make_spec())
    [idle] = [s for s in sandboxes_of(runtime) if s.name.startswith(sandboxes.POOL_PREFIX)]
    idle.kill()
    spec = make_spec()

    steps: list[str] = []
    started = start(runtime, spec, steps.append)

    assert any("network sandbox failed" in step for step in steps), steps
    container = inspect(runtime, container_name(spec.instance_id))
    assert container["HostConfig"]["NetworkMode"] == network.NETWORK
    assert not exists(runtime, sandboxes.sandbox_name(spec.instance_id))
    assert jupyter_status(started, spec.token) == 200
    # The pool was emptied (after an engine restart every idle sandbox is dead) and made
    # again: the next start joins a live one.
    assert not exists(runtime, idle.id)
    wait_for(lambda: runtime.sandboxes.idle_count() == 1, 60, "the pool made again")
    again = make_spec()
    start(runtime, again)
    assert exists(runtime, sandboxes.sandbox_name(again.instance_id))


def test_idle_sandboxes_go_with_the_runtime_and_leftovers_at_the_next_start(
    runtime, make_spec, docker_runtime
):
    warm(runtime, make_spec())
    # An agent killed with its pool full: the next agent of that name clears it.
    successor = DockerRuntime(
        client=docker_runtime.client, host_name=runtime.host_name, sandbox_pool=1
    )
    successor.prepare_host()
    assert not [s for s in sandboxes_of(runtime) if s.name.startswith(sandboxes.POOL_PREFIX)]
    # (The fixture checks that close() leaves none at all.)


def test_a_claimed_sandbox_whose_instance_never_came_is_collected(runtime, make_spec, monkeypatch):
    warm(runtime, make_spec())
    spec = make_spec()
    claimed = runtime.sandboxes.claim(spec)  # as if the agent died before creating it
    assert claimed is not None and exists(runtime, sandboxes.sandbox_name(spec.instance_id))

    runtime.list_instances()  # too young to be collected: a start may be under way
    assert exists(runtime, sandboxes.sandbox_name(spec.instance_id))

    monkeypatch.setattr(sandboxes, "ORPHAN_AGE_S", 0.0)
    runtime.list_instances()
    assert not exists(runtime, sandboxes.sandbox_name(spec.instance_id))


def test_a_container_removed_between_the_list_and_its_inspect_is_not_a_failed_heartbeat(
    runtime, make_spec, monkeypatch
):
    """The engine lists ids, then the SDK inspects each: a stop or the filler removing one in
    between (CI saw it: 'No such container') must leave the heartbeat's listing whole."""
    warm(runtime, make_spec())
    kept = make_spec()
    start(runtime, kept)
    wait_for(lambda: runtime.sandboxes.idle_count() == 1, 60, "the pool refilled")
    [idle] = [s for s in sandboxes_of(runtime) if s.name.startswith(sandboxes.POOL_PREFIX)]
    real_get = ContainerCollection.get

    def get_after_a_removal(collection, container_id):
        if container_id == idle.id:
            with contextlib.suppress(docker.errors.NotFound):  # gone in between
                runtime.client.api.remove_container(idle.id, force=True)
        return real_get(collection, container_id)

    # (client.containers is a new collection at each use: the class is where list finds get)
    monkeypatch.setattr(ContainerCollection, "get", get_after_a_removal)
    states = runtime.list_instances()
    assert states[kept.instance_id] == "running"
    assert not exists(runtime, idle.id)


@pytest.fixture
def host_listener():
    server = socket.create_server(("0.0.0.0", 0))  # noqa: S104 - the point of the test
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def reachable_from(runtime, instance_id: str, address: str, port: int) -> bool:
    probe = (
        "import socket,sys; s=socket.socket(); s.settimeout(3); "
        f"sys.exit(0 if s.connect_ex(({address!r}, {port})) == 0 else 1)"
    )
    container = runtime.client.containers.get(container_name(instance_id))
    return container.exec_run(["python3", "-c", probe]).exit_code == 0


def test_instances_in_sandboxes_cannot_reach_each_other_or_the_host(
    runtime, make_spec, host_listener
):
    runtime.sandboxes.size = 2
    warm_spec = make_spec()
    start(runtime, warm_spec)
    wait_for(lambda: runtime.sandboxes.idle_count() == 2, 60, "two idle sandboxes")
    one, two = make_spec(), make_spec()
    start(runtime, one)
    start(runtime, two)
    for spec in (one, two):
        assert exists(runtime, sandboxes.sandbox_name(spec.instance_id))
    networks = inspect(runtime, sandboxes.sandbox_name(two.instance_id))["NetworkSettings"]
    address_of_two = networks["Networks"][network.NETWORK]["IPAddress"]
    gateway = networks["Networks"][network.NETWORK]["Gateway"]

    # Control: the target answers where it may be reached (inside its own namespace).
    assert reachable_from(runtime, two.instance_id, "127.0.0.1", 8888)
    assert not reachable_from(runtime, one.instance_id, address_of_two, 8888)
    assert not reachable_from(runtime, one.instance_id, gateway, host_listener)
