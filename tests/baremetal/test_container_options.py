"""A dedicated host's container: what multi-GPU training needs, on top of the same
hardening an ordinary instance has (create_kwargs for both, and a real container)."""

from __future__ import annotations

import resource
import socket
import uuid

import pytest
import requests

from gpurental import protocol
from gpurental.agent.host import HostAgent
from gpurental.agent.runtimes.base import (
    ContainerSpec,
    dedicated_fields,
    grantable_memlock,
    ignore_progress,
)
from gpurental.agent.runtimes.docker import container_name, create_kwargs
from gpurental.agent.runtimes.network import NETWORK
from tests.agent.conftest import docker_runtime, make_spec  # noqa: F401 - fixtures

HARDENING = {
    "security_opt": ["no-new-privileges:true"],
    "cap_drop": ["ALL"],
    "privileged": False,
    "pids_limit": 256,
}


def spec(**overrides) -> ContainerSpec:
    values = {
        "instance_id": str(uuid.uuid4()),
        "image": "gpurental/jupyter-cpu:latest",
        "token": uuid.uuid4().hex,
        "gpu_indices": (0, 1, 2, 3),
        "gpu_uuids": ("GPU-a", "GPU-b", "GPU-c", "GPU-d"),
        "gpu_source": "nvml",
        "cpu_count": 64.0,
        "memory_mb": 512 * 1024,
        "pids_limit": 256,
    }
    values.update(overrides)
    return ContainerSpec(**values)


def test_an_ordinary_instance_keeps_its_hardening_and_gets_nothing_more():
    kwargs = create_kwargs(spec())
    assert {k: kwargs[k] for k in HARDENING} == HARDENING
    assert kwargs["network"] == NETWORK and kwargs["ports"] == {"8888/tcp": ("127.0.0.1",)}
    for key in ("ulimits", "shm_size", "devices", "network_mode", "ipc_mode"):
        assert key not in kwargs


def test_a_dedicated_instance_gets_shm_ulimits_and_rdma_devices_with_the_same_hardening():
    kwargs = create_kwargs(
        spec(
            dedicated=True,
            shm_size_mb=16384,
            infiniband_devices=("/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"),
        )
    )
    assert {k: kwargs[k] for k in HARDENING} == HARDENING
    assert kwargs["shm_size"] == "16384m"
    assert [(u.name, u.soft, u.hard) for u in kwargs["ulimits"]] == [
        ("memlock", -1, -1),
        ("stack", 67108864, 67108864),
    ]
    assert kwargs["devices"] == [
        "/dev/infiniband/rdma_cm:/dev/infiniband/rdma_cm:rwm",
        "/dev/infiniband/uverbs0:/dev/infiniband/uverbs0:rwm",
    ]
    # Still on the tenant network unless host networking was allowed and asked for.
    assert kwargs["network"] == NETWORK and "network_mode" not in kwargs
    assert kwargs["nano_cpus"] == 64 * 10**9 and kwargs["mem_limit"] == f"{512 * 1024}m"


def test_host_networking_replaces_the_tenant_network_and_publishes_nothing():
    kwargs = create_kwargs(spec(dedicated=True, shm_size_mb=1024, host_network=True))
    assert kwargs["network_mode"] == "host"
    assert kwargs["network"] is None and kwargs["ports"] is None
    assert {k: kwargs[k] for k in HARDENING} == HARDENING
    # The engine cannot remap users with the host's network: not root, no capabilities.
    assert kwargs["userns_mode"] == "host" and kwargs["user"] == "1000:1000"
    assert kwargs["cap_add"] is None and kwargs["environment"]["HOME"] == "/workspace"


def test_elsewhere_root_keeps_only_the_few_capabilities_it_needs():
    kwargs = create_kwargs(spec(dedicated=True, shm_size_mb=1024))
    assert "userns_mode" not in kwargs and "user" not in kwargs
    assert set(kwargs["cap_add"]) == {
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "SETUID",
        "SETGID",
        "KILL",
        "SYS_CHROOT",
    }


def test_rdma_devices_come_from_the_agent_s_own_dev_and_only_when_present(tmp_path):
    assert dedicated_fields({"shm_size_mb": 8}, infiniband_dir=str(tmp_path / "none")) == {
        "dedicated": True,
        "shm_size_mb": 8,
        "host_network": False,
        "infiniband_devices": (),
        "memlock_bytes": grantable_memlock(),
    }
    ib = tmp_path / "infiniband"
    ib.mkdir()
    for name in ("uverbs0", "rdma_cm"):
        (ib / name).touch()
    fields = dedicated_fields({"shm_size_mb": 8, "host_network": True}, infiniband_dir=str(ib))
    assert fields["infiniband_devices"] == (str(ib / "rdma_cm"), str(ib / "uverbs0"))
    assert fields["host_network"] is True


def test_memlock_is_unlimited_where_the_host_may_raise_limits(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tagent\nCapEff:\t000001ffffffffff\n")  # CAP_SYS_RESOURCE held
    assert grantable_memlock(str(status)) == -1
    status.write_text("Name:\tagent\nCapEff:\t000001fffeffffff\n")  # a sandbox without it
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    expected = -1 if hard == resource.RLIM_INFINITY else hard
    assert grantable_memlock(str(status)) == expected


SPEC_KEY = protocol.host_keys(protocol.host_root("a join token")).spec


def _wire_spec(**extra) -> dict:
    return {
        "spec_version": protocol.SPEC_VERSION,
        "instance_id": str(uuid.uuid4()),
        "image": "gpurental/jupyter-cpu:latest",
        "sealed": protocol.spec_seal(SPEC_KEY, {"token": "t0ken"}),
        "gpu_indices": [0],
        "gpu_uuids": [],
        "gpu_source": "simulated",
        "cpu_count": 2.0,
        "memory_mb": 2048,
        "pids_limit": 256,
        "container_port": 8888,
        "http_ports": [],
        "ssh": None,
        "env": {},
        "mount_model_cache": False,
        "command": [],
        **extra,
    }


def test_the_agent_reads_the_optional_dedicated_field_and_specs_without_it():
    agent = HostAgent.__new__(HostAgent)  # only _spec is exercised: no broker, no engine
    agent.bind_address, agent.hf_cache_dir = "127.0.0.1", ""
    plain = agent._spec(protocol.spec_open(SPEC_KEY, protocol.spec_check(_wire_spec())))
    assert plain.dedicated is False and plain.shm_size_mb == 0
    wire = _wire_spec(dedicated={"shm_size_mb": 4096, "host_network": False})
    leased = agent._spec(protocol.spec_open(SPEC_KEY, protocol.spec_check(wire)))
    assert (leased.dedicated, leased.shm_size_mb, leased.host_network) == (True, 4096, False)
    with pytest.raises(protocol.SpecRefused, match="unknown"):
        protocol.spec_check(_wire_spec(privileged=True))


def memlock_limit_kib(limit: int) -> str | None:
    return None if limit == -1 else str(limit // 1024)


@pytest.mark.docker
def test_a_real_dedicated_container_has_the_shm_and_limits(docker_runtime, make_spec):  # noqa: F811
    # memlock: what this host can grant (unlimited on a real GPU server; a sandboxed
    # engine without CAP_SYS_RESOURCE refuses more than its own hard limit).
    memlock = grantable_memlock()
    instance = make_spec(dedicated=True, shm_size_mb=1024, memlock_bytes=memlock)
    try:
        docker_runtime.start(instance, ignore_progress)
        container = docker_runtime.client.containers.get(container_name(instance.instance_id))
        code, out = container.exec_run(
            ["sh", "-c", "ulimit -l; ulimit -s; df -m /dev/shm | tail -1"]
        )
        assert code == 0, out
        memlock_seen, stack, shm = out.decode().splitlines()
        expected = "unlimited" if memlock_limit_kib(memlock) is None else memlock_limit_kib(memlock)
        assert memlock_seen == expected and stack == str(65536)  # KiB
        assert shm.split()[1] == "1024"
        host_config = container.attrs["HostConfig"]
        assert host_config["CapDrop"] == ["ALL"] and not host_config["Privileged"]
        assert host_config["SecurityOpt"] == ["no-new-privileges:true"]
    finally:
        docker_runtime.remove(instance.instance_id)


@pytest.mark.docker
def test_a_real_container_on_host_networking_answers_on_the_host_s_own_port(
    docker_runtime,  # noqa: F811
    make_spec,  # noqa: F811
):
    with socket.socket() as s:  # a free port on this machine: the container shares its stack
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    instance = make_spec(
        dedicated=True,
        shm_size_mb=256,
        host_network=True,
        memlock_bytes=grantable_memlock(),
        container_port=port,
        command=(
            "jupyter",
            "lab",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--no-browser",
            "--ServerApp.root_dir=/workspace",
        ),
    )
    try:
        started = docker_runtime.start(instance, ignore_progress)
        assert (started.host, started.port) == ("127.0.0.1", port)
        answer = requests.get(
            f"http://127.0.0.1:{port}/api/status",
            headers={"Authorization": f"token {instance.token}"},
            timeout=5,
        )
        assert answer.status_code == 200
        host_config = docker_runtime.client.api.inspect_container(
            container_name(instance.instance_id)
        )["HostConfig"]
        assert host_config["NetworkMode"] == "host" and not host_config["PortBindings"]
        assert host_config["CapDrop"] == ["ALL"]
    finally:
        docker_runtime.remove(instance.instance_id)
