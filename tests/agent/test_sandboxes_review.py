"""Review of the network sandboxes (runtimes/sandboxes.py): defects shown on the real
Docker Engine; each was a strict xfail until its fix, and now holds the fix."""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
import uuid

import docker.errors
import pytest
from docker.models.containers import Container

from gpurental.agent.runtimes import sandboxes
from gpurental.agent.runtimes.base import RuntimeFailure, ignore_progress
from gpurental.agent.runtimes.docker import DockerRuntime, container_name, create_kwargs
from gpurental.testing.agent_process import wait_for
from tests.agent.conftest import JUPYTER_IMAGE
from tests.agent.test_network_sandboxes import (  # noqa: F401 - runtime is a fixture
    exists,
    inspect,
    jupyter_status,
    runtime,
    sandboxes_of,
    start,
    warm,
)

pytestmark = pytest.mark.docker

REVIEW_LABEL = "gpurental.review"


def remove_image(client, image_id: str) -> None:
    """The test's own image, and first whatever container (a sandbox) still runs it."""
    for container in client.containers.list(
        all=True, filters={"ancestor": image_id}, ignore_removed=True
    ):
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True, v=True)
    with contextlib.suppress(docker.errors.DockerException):
        client.images.remove(image_id, force=True)


@pytest.fixture
def cuda_like_image(docker_runtime):
    """The instance image as a CUDA image looks to the engine: NVIDIA_VISIBLE_DEVICES=all in
    its environment, and a VOLUME (an anonymous volume per container)."""
    client = docker_runtime.client
    base = client.containers.create(
        JUPYTER_IMAGE, labels={REVIEW_LABEL: "1"}, name=f"review-{uuid.uuid4().hex[:12]}"
    )
    tag = uuid.uuid4().hex[:12]
    try:
        image = base.commit(
            repository="gpurental-review/cuda-like",
            tag=tag,
            changes=["ENV NVIDIA_VISIBLE_DEVICES=all", 'VOLUME ["/data"]'],
        )
    finally:
        base.remove(force=True)
    yield f"gpurental-review/cuda-like:{tag}"
    remove_image(client, image.id)


@pytest.fixture
def pool(docker_runtime):
    """A pool of its own host name; whatever it made goes afterwards."""
    host_name = f"review-{uuid.uuid4().hex[:8]}"
    pool = sandboxes.SandboxPool(docker_runtime.client, size=1, host_name=host_name)
    yield pool
    pool.close()
    mine = {"label": [sandboxes.LABEL_SANDBOX, f"gpurental.host={host_name}"]}
    for sandbox in docker_runtime.client.containers.list(
        all=True, filters=mine, ignore_removed=True
    ):
        sandbox.remove(force=True, v=True)


# Review finding (fixed): a sandbox keeps its image's NVIDIA_VISIBLE_DEVICES (=all in CUDA
# images): every GPU on hosts whose default runtime is nvidia
def test_a_sandbox_names_no_gpus(pool, cuda_like_image):
    sandbox = pool._make((cuda_like_image, (8888,), "127.0.0.1"))
    assert sandbox is not None
    env = inspect(pool, sandbox.id)["Config"]["Env"]
    # As every other container the agent makes (docker.container_environment): the GPUs
    # named explicitly, here none at all.
    assert "NVIDIA_VISIBLE_DEVICES=void" in env, env


# Review finding (fixed): a removed sandbox leaves its image's anonymous volumes behind
# (remove without v)
def test_a_removed_sandbox_leaves_no_volume(pool, cuda_like_image, docker_runtime):
    key = (cuda_like_image, (8888,), "127.0.0.1")
    sandbox = pool._make(key)
    assert sandbox is not None
    volumes = [m["Name"] for m in inspect(pool, sandbox.id)["Mounts"] if m["Type"] == "volume"]
    assert volumes  # the image's VOLUME /data
    with pool._lock:
        pool._idle.setdefault(key, []).append(sandbox)
    try:
        pool.flush()  # as close(), a dead sandbox or an agent restart (clear_leftovers)
        assert not exists(pool, sandbox.id)
        left = []
        for name in volumes:
            with contextlib.suppress(docker.errors.NotFound):
                docker_runtime.client.volumes.get(name)
                left.append(name)
        assert not left, f"anonymous volumes left behind: {left}"
    finally:
        for name in volumes:
            with contextlib.suppress(docker.errors.DockerException):
                docker_runtime.client.volumes.get(name).remove(force=True)


# Review finding (fixed): two starts of one instance at once: the loser keeps a claimed
# sandbox running  (ports published) that no container joined, until the instance is
# removed
def test_two_starts_of_one_instance_leave_no_unused_sandbox(runtime, make_spec, monkeypatch):  # noqa: F811
    warm(runtime, make_spec())
    spec = make_spec()
    claim = runtime.sandboxes.claim

    def claim_then_lose_the_race(spec_):
        sandbox = claim(spec_)
        # The other start of this instance (no sandbox idle for it) creates its container
        # first, on the tenant network directly.
        runtime.client.containers.create(**create_kwargs(spec_, runtime.host_name))
        return sandbox

    monkeypatch.setattr(runtime.sandboxes, "claim", claim_then_lose_the_race)
    started = start(runtime, spec)
    monkeypatch.undo()

    assert jupyter_status(started, spec.token) == 200
    container = inspect(runtime, container_name(spec.instance_id))
    joined = sandboxes.sandbox_of(container)
    name = sandboxes.sandbox_name(spec.instance_id)
    assert joined is not None or not exists(runtime, name), (
        f"{name} runs, publishing {inspect(runtime, name)['NetworkSettings']['Ports']}, "
        "but the instance's container is on its own network"
    )
    # Nor do the orphan collection of a heartbeat remove it: its instance exists.
    runtime.list_instances()


# Review finding (fixed): claim() records the claim only after the rename: a heartbeat's
# list_instances  in between collects the sandbox a start is about to join
def test_a_heartbeat_right_after_a_claim_spares_its_sandbox(runtime, make_spec, monkeypatch):  # noqa: F811
    warm(runtime, make_spec())
    spec = make_spec()
    rename = Container.rename
    beats: list[dict] = []

    def rename_then_heartbeat(self, name):
        rename(self, name)
        if not beats:  # the heartbeat thread's list_instances, just then
            beats.append(runtime.list_instances())

    monkeypatch.setattr(Container, "rename", rename_then_heartbeat)
    steps: list[str] = []
    started = start(runtime, spec, steps.append)
    monkeypatch.undo()

    assert beats
    assert jupyter_status(started, spec.token) == 200
    assert not any("network sandbox failed" in step for step in steps), steps
    container = inspect(runtime, container_name(spec.instance_id))
    assert sandboxes.sandbox_of(container) is not None, "the claimed sandbox was collected"


# Review finding (fixed): a start the engine refuses for its own reasons (no GPU driver)
# is blamed on the  sandbox: the whole pool is flushed and the failing start is tried a
# second time
def test_a_start_failing_on_its_own_keeps_the_pool(runtime, make_spec):  # noqa: F811
    runtime.sandboxes.size = 2
    start(runtime, make_spec())
    wait_for(lambda: runtime.sandboxes.idle_count() == 2, 60, "two idle sandboxes")
    idle = {s.id for s in sandboxes_of(runtime) if s.name.startswith(sandboxes.POOL_PREFIX)}
    assert len(idle) == 2

    # The engine refuses to start it (an unknown GPU; here no NVIDIA toolkit at all), whatever
    # its network: the same refusal as with any device, mount or runtime problem.
    bad = make_spec(
        gpu_source="nvml", gpu_indices=(0,), gpu_uuids=("GPU-00000000-0000-0000-0000-000000000000",)
    )
    steps: list[str] = []
    with pytest.raises(RuntimeFailure):
        start(runtime, bad, steps.append)

    left = {s.id for s in sandboxes_of(runtime) if s.name.startswith(sandboxes.POOL_PREFIX)}
    # The failed start took one sandbox (gone with its container); the other is fine.
    assert len(idle & left) == 1, "the pool was flushed"
    assert not any("network sandbox failed" in step for step in steps), steps


# Review finding (fixed): an agent crash between claim and create, then a start of that
# instance: the  claimed sandbox is never collected (its instance exists) and keeps its
# ports
def test_a_sandbox_claimed_before_a_crash_goes_once_its_instance_started_without_it(
    runtime,  # noqa: F811
    make_spec,
    docker_runtime,
):
    warm(runtime, make_spec())
    spec = make_spec()
    assert runtime.sandboxes.claim(spec) is not None  # then the agent died
    name = sandboxes.sandbox_name(spec.instance_id)
    # The next agent of this host (its pool still empty) is asked to start it again.
    successor = DockerRuntime(
        client=docker_runtime.client, host_name=runtime.host_name, sandbox_pool=1
    )
    runtime.started.append(spec.instance_id)
    started = successor.start(spec, ignore_progress)
    try:
        assert jupyter_status(started, spec.token) == 200
        successor.list_instances()  # the heartbeat's orphan collection
        container = inspect(runtime, container_name(spec.instance_id))
        assert sandboxes.sandbox_of(container) is not None or not exists(runtime, name), (
            f"{name} outlives the crash, unused, publishing "
            f"{inspect(runtime, name)['NetworkSettings']['Ports']}"
        )
    finally:
        successor.close()


@pytest.fixture
def sleepless_image(docker_runtime):
    """An image whose ``sleep infinity`` exits at once (a sleep that knows no infinity)."""
    client = docker_runtime.client
    base = client.containers.create(
        JUPYTER_IMAGE, labels={REVIEW_LABEL: "1"}, name=f"review-{uuid.uuid4().hex[:12]}"
    )
    script = b"#!/bin/sh\necho 'sleep: invalid time interval' >&2\nexit 1\n"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("sleep")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    tag = uuid.uuid4().hex[:12]
    try:
        base.put_archive("/opt/venv/bin", archive.getvalue())  # first on the image's PATH
        image = base.commit(repository="gpurental-review/sleepless", tag=tag)
    finally:
        base.remove(force=True)
    yield f"gpurental-review/sleepless:{tag}"
    remove_image(client, image.id)


# Review finding (fixed): a sandbox whose sleep exits right after its start is pooled (no
# check, no  backoff): every launch of that image fails over and flushes the whole pool
def test_a_sandbox_that_exits_at_once_is_not_pooled(pool, sleepless_image, make_spec):
    spec = make_spec(image=sleepless_image)
    assert pool.claim(spec) is None  # no sandbox yet: the key is now wanted
    pool.replenish()
    wait_for(lambda: pool.made >= 1 or pool._failed, 60, "the filler's attempt")
    time.sleep(2)
    with pool._lock:
        idle = [s.id for pooled in pool._idle.values() for s in pooled]
    states = [inspect(pool, sandbox)["State"]["Status"] for sandbox in idle]
    assert all(state == "running" for state in states), f"idle sandboxes: {states}"
