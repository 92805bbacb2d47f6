"""Runtime backends for instances; the interface is documented in ``base.py``.

``make_runtime("docker")`` or ``make_runtime("process", base_dir=…)`` builds one;
``docker_problem()`` says why the docker runtime cannot be used here (None when it
can), for the agent's start-up banner. Nothing here imports Django, and ``docker``
is imported only when the docker runtime is asked for.
"""

from __future__ import annotations

from typing import Any

from .base import (
    ContainerRuntimeError,
    ContainerSpec,
    ImageNotFound,
    Runtime,
    RuntimeFailure,
    Started,
    wait_for_jupyter,
)

RUNTIME_KINDS = ("docker", "process")

__all__ = [
    "RUNTIME_KINDS",
    "ContainerRuntimeError",
    "ContainerSpec",
    "ImageNotFound",
    "Runtime",
    "RuntimeFailure",
    "Started",
    "docker_available",
    "docker_problem",
    "make_runtime",
    "wait_for_jupyter",
]


def make_runtime(kind: str, **kwargs: Any) -> Runtime:
    """Build the runtime ``kind``; keyword arguments go to its constructor."""
    if kind == "docker":
        from .docker import DockerRuntime

        return DockerRuntime(**kwargs)
    if kind == "process":
        from .process import ProcessRuntime

        return ProcessRuntime(**kwargs)
    raise ValueError(f"unknown runtime {kind!r}; expected one of: {', '.join(RUNTIME_KINDS)}")


def docker_problem(timeout_s: float = 3.0) -> str | None:
    """Why no Docker Engine can be used from here, or None when one answers."""
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed"
    try:
        client = docker.from_env(timeout=timeout_s)
    except docker.errors.DockerException as exc:
        return f"no Docker Engine answers ({exc})"
    try:
        client.ping()
    except Exception as exc:  # any failure means "not usable", with its reason
        return f"the Docker Engine does not answer ({exc})"
    finally:
        client.close()
    return None


def docker_available(timeout_s: float = 3.0) -> bool:
    return docker_problem(timeout_s) is None
