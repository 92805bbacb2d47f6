"""A customer's volume on the real Docker Engine: mounted where they asked, kept when the
instance goes, mounted again by the next one, measured, and removed when deleted."""

from __future__ import annotations

import uuid

import docker.errors
import pytest

from gpurental.agent.runtimes.base import ignore_progress
from gpurental.agent.runtimes.docker import DockerRuntime, container_name

pytestmark = pytest.mark.docker


def test_a_volume_outlives_its_instance_and_the_next_one_mounts_it(
    docker_runtime, make_spec, cleanup
):
    runtime = DockerRuntime(client=docker_runtime.client, ready_timeout_s=60, host_name="vol-test")
    volume_id = str(uuid.uuid4())
    mount = (f"gpurental-vol-{volume_id}", "/data", volume_id)
    first = make_spec(volumes=(mount,))
    runtime.start(first, ignore_progress)
    cleanup(runtime, first.instance_id)
    container = runtime.client.containers.get(container_name(first.instance_id))
    code, out = container.exec_run(
        ["sh", "-c", "head -c 3000000 /dev/urandom > /data/set.bin && sha256sum /data/set.bin"]
    )
    assert code == 0, out
    digest = out.decode().split()[0]
    runtime.remove(first.instance_id)  # terminated: its /workspace goes, the volume stays
    assert runtime.client.volumes.get(mount[0]).attrs["Labels"]["gpurental.volume"] == volume_id

    second = make_spec(volumes=(mount,))
    runtime.start(second, ignore_progress)
    cleanup(runtime, second.instance_id)
    container = runtime.client.containers.get(container_name(second.instance_id))
    code, out = container.exec_run(["sha256sum", "/data/set.bin"])
    assert code == 0 and out.decode().split()[0] == digest
    assert runtime.volume_usage()[volume_id] >= 3_000_000

    runtime.remove(second.instance_id)
    runtime.volume_remove(mount[0])
    with pytest.raises(docker.errors.NotFound):
        runtime.client.volumes.get(mount[0])
    with pytest.raises(Exception, match="not a customer's volume"):
        runtime.volume_remove(f"gpurental-ws-{volume_id}")
