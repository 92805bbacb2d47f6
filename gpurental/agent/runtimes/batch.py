"""One-shot containers that run to completion on the local Docker Engine: the acceptance
probe. Not instances: no workspace, no published port, no instance label (reconciliation
never sees them), and no network at all (``network_mode="none"``: the probe needs only
loopback, which NCCL between the GPUs of one host is content with).

Hardened like instances (``docker.py``): no privileges, every capability dropped,
no-new-privileges, CPU / memory / pids limits, GPUs only by ``DeviceRequest``.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from dataclasses import dataclass

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, LogConfig

from .base import LABEL_HOST, RuntimeFailure

LABEL_BATCH = "gpurental.batch"
SCRIPT_DIR = "/tmp"  # noqa: S108 - inside the container, which is thrown away afterwards


@dataclass(frozen=True)
class BatchResult:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


def _tar_one(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def batch_kwargs(
    *,
    name: str,
    image: str,
    script_name: str,
    args: list[str],
    gpu_uuids: list[str],
    cpu_count: float,
    memory_mb: int,
    shm_mb: int,
    host_name: str,
) -> dict:
    device_requests = []
    if gpu_uuids:
        device_requests.append(DeviceRequest(device_ids=list(gpu_uuids), capabilities=[["gpu"]]))
    return {
        "image": image,
        "name": name,
        # The image's own entrypoint (JupyterLab's start script) is not wanted here.
        "entrypoint": ["python3", f"{SCRIPT_DIR}/{script_name}"],
        "command": list(args),
        "labels": {LABEL_BATCH: name, LABEL_HOST: host_name},
        "environment": {
            "NVIDIA_VISIBLE_DEVICES": ",".join(gpu_uuids) or "void",
            "HOME": SCRIPT_DIR,
            "PYTHONUNBUFFERED": "1",
        },
        "network_mode": "none",
        "nano_cpus": int(cpu_count * 1_000_000_000),
        "mem_limit": f"{memory_mb}m",
        # NCCL between the GPUs of one host moves its buffers through /dev/shm.
        "shm_size": f"{shm_mb}m",
        "pids_limit": 1024,
        "security_opt": ["no-new-privileges:true"],
        "cap_drop": ["ALL"],
        "privileged": False,
        "device_requests": device_requests,
        "log_config": LogConfig(type="json-file", config={"max-size": "10m", "max-file": "1"}),
    }


def run_script(
    client: docker.DockerClient,
    *,
    name: str,
    image: str,
    script_name: str,
    script: bytes,
    args: list[str],
    gpu_uuids: list[str],
    cpu_count: float,
    memory_mb: int,
    timeout_s: float,
    host_name: str = "",
    shm_mb: int = 2048,
) -> BatchResult:
    """Run ``script`` with the image's python3 and return its output; the container is
    removed afterwards whatever happens. RuntimeFailure when it cannot run or overruns."""
    started = time.monotonic()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as exc:
        raise RuntimeFailure(
            f"image {image} is not on this host: build it with `make images` (or `docker load` it)"
        ) from exc
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise RuntimeFailure(f"no Docker Engine answers on this host ({exc})") from exc
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)  # a leftover of an earlier try
    container = None
    try:
        container = client.containers.create(
            **batch_kwargs(
                name=name,
                image=image,
                script_name=script_name,
                args=args,
                gpu_uuids=gpu_uuids,
                cpu_count=cpu_count,
                memory_mb=memory_mb,
                shm_mb=shm_mb,
                host_name=host_name,
            )
        )
        container.put_archive(SCRIPT_DIR, _tar_one(script_name, script))
        container.start()
        try:
            status = container.wait(timeout=timeout_s)
        except requests.exceptions.ReadTimeout as exc:
            raise RuntimeFailure(
                f"the benchmark container did not finish within {timeout_s:g} s"
            ) from exc
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        container.reload()
        if container.attrs["State"].get("OOMKilled"):
            stderr += f"\n(out of memory: the benchmark was allowed {memory_mb} MB)"
        return BatchResult(
            exit_code=int(status.get("StatusCode", -1)),
            stdout=stdout,
            stderr=stderr,
            seconds=time.monotonic() - started,
        )
    except docker.errors.APIError as exc:
        raise RuntimeFailure(
            f"Docker Engine refused the benchmark: {exc.explanation or exc}"
        ) from exc
    finally:
        if container is not None:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
