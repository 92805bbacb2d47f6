"""Fixtures for the runtime tests: plain pytest, no Django, no database.

Docker tests run against the real engine and the real instance image. Without an
engine they are skipped on a developer machine, but fail under CI (``CI`` set),
so that a broken CI runner cannot pass by skipping them.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpurental.agent.runtimes import ContainerSpec, docker_problem

JUPYTER_IMAGE = "gpurental/jupyter-cpu:latest"


def skip_unless_ci(reason: str) -> None:
    """Skip on a developer machine; under CI a missing prerequisite is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so these tests must run, but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_runtime():
    problem = docker_problem()
    if problem is not None:
        skip_unless_ci(f"{problem}; start one with: sudo scripts/docker-engine.sh")
    import docker.errors

    from gpurental.agent.runtimes.docker import DockerRuntime

    runtime = DockerRuntime(ready_timeout_s=60)
    try:
        runtime.client.images.get(JUPYTER_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{JUPYTER_IMAGE} is not built; run `make images` (images/build.sh)")
    return runtime


@pytest.fixture(scope="session")
def jupyter_installed() -> None:
    """The process runtime runs JupyterLab from the Python running the tests."""
    if not (Path(sys.executable).parent / "jupyter-lab").exists():
        skip_unless_ci(
            f"JupyterLab is not installed next to {sys.executable}: pip install jupyterlab"
        )


@pytest.fixture(scope="session")
def make_spec() -> Callable[..., ContainerSpec]:
    """A spec for a fresh instance id; keyword arguments override the defaults."""

    def make(**overrides) -> ContainerSpec:
        values = {
            "instance_id": str(uuid.uuid4()),
            "image": JUPYTER_IMAGE,
            "token": uuid.uuid4().hex,
            "gpu_indices": (0, 1),
            "gpu_uuids": (),
            "gpu_source": "simulated",
            "cpu_count": 1.5,
            "memory_mb": 768,
            "pids_limit": 256,
        }
        values.update(overrides)
        return ContainerSpec(**values)

    return make


@pytest.fixture
def cleanup() -> Iterator[Callable[[object, str], str]]:
    """Register (runtime, instance_id) pairs; each is removed after the test."""
    registered: list[tuple[object, str]] = []

    def register(runtime, instance_id: str) -> str:
        registered.append((runtime, instance_id))
        return instance_id

    yield register
    for runtime, instance_id in registered:
        runtime.remove(instance_id)
