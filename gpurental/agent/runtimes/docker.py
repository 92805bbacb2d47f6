"""DockerRuntime: one hardened container per instance on the local Docker Engine.

Names: container ``gpurental-<instance_id>``, volume ``gpurental-ws-<instance_id>``
mounted at /workspace. Both carry the labels ``gpurental.instance=<id>`` and
``gpurental.managed=true`` so that reconciliation finds everything the platform
created, orphans included.

Hardening follows DESIGN.md: no privileges, no Docker socket, no-new-privileges,
every capability dropped, CPU/memory/pids limits from the plan, JupyterLab's port
published only on the spec's bind address, GPUs only by DeviceRequest.

A container joins a network sandbox made ahead of time when one is idle (sandboxes.py):
then the sandbox, on the tenant network, publishes the ports and the container has none
of its own (``network_mode="container:<sandbox>"``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from gpurental import imagerefs

from . import network, pulls, sandboxes
from .base import (
    LABEL_HOST,
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_SPEC,
    ContainerSpec,
    ImageNotFound,
    Progress,
    PullPolicy,
    RuntimeFailure,
    Started,
    check_instance_id,
    ignore_progress,
    wait_for_jupyter,
)
from .imagecache import ImageCache

WORKSPACE = "/workspace"
# What a saved image must not keep of its container's environment: this run's secrets.
SECRET_ENV = frozenset(
    {
        "JUPYTER_TOKEN",
        "GPURENTAL_SSH_HOST_KEY",
        "GPURENTAL_SSH_AUTHORIZED_KEYS",
        "GPURENTAL_SSH_PORT",
    }
)
LABEL_SAVED_FROM = "gpurental.saved-from"
LABEL_VOLUME = "gpurental.volume"  # on a customer's volume: its id  # on a saved image: the instance it was saved from
HF_CACHE_MOUNT = "/models/huggingface"
HF_HOME = f"{WORKSPACE}/.cache/huggingface"
LOG_MAX_SIZE, LOG_MAX_FILES = "10m", 3  # at most 30 MB of logs per container
_GONE_STATES = ("exited", "dead")
# A stopped container that may be started again as it is ("dead" ones may not).
_KEPT_STATES = ("exited", "created")
_NO_GPU_DRIVER = "could not select device driver"


def container_name(instance_id: str) -> str:
    return f"gpurental-{check_instance_id(instance_id)}"


def volume_name(instance_id: str) -> str:
    return f"gpurental-ws-{check_instance_id(instance_id)}"


def instance_labels(instance_id: str, host_name: str = "") -> dict[str, str]:
    labels = {LABEL_INSTANCE: instance_id, LABEL_MANAGED: "true"}
    if host_name:
        # Several agents may share one engine (one machine, several names): each
        # lists and reconciles only what it created.
        labels[LABEL_HOST] = host_name
    return labels


def container_environment(spec: ContainerSpec) -> dict[str, str]:
    env = dict(spec.env)
    if spec.hf_cache_dir:
        # The shared cache is read-only; HF_HOME is the instance's own (on its workspace
        # volume, so downloads and `hf auth login` persist and count against its disk). The
        # image's entrypoint links the shared files into it (images/jupyter-cpu/hf_cache_seed.py).
        env["HF_HOME"] = HF_HOME
        env["GPURENTAL_HF_SHARED"] = HF_CACHE_MOUNT
    # Set last so that a template's env can never override them.
    env["JUPYTER_TOKEN"] = spec.token
    # Which instance this is: the hostname says so only when the container has its own
    # network (one in a pooled sandbox takes the sandbox's).
    env["GPURENTAL_INSTANCE_ID"] = spec.instance_id
    if spec.ssh_port:
        # The image's entrypoint starts sshd with these (images/jupyter-cpu/start.sh).
        env["GPURENTAL_SSH_PORT"] = str(spec.ssh_port)
        env["GPURENTAL_SSH_HOST_KEY"] = spec.ssh_host_key
        env["GPURENTAL_SSH_AUTHORIZED_KEYS"] = spec.ssh_authorized_keys
    if spec.gpu_source == "nvml":
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all; on a host whose default
        # runtime is nvidia that would expose every GPU, so always name them
        # (or none at all) explicitly.
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(spec.gpu_uuids) or "void"
    else:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpu_indices) or "void"
    return env


# The customer is root in the container (images/README.md); the engine remaps it to an
# unprivileged host uid (userns-remap), and these are all the capabilities it keeps: what
# apt-get, dpkg, system-wide pip and chown need, and SYS_CHROOT for sshd's privilege
# separation. Never SYS_ADMIN, NET_ADMIN or NET_RAW (no raw sockets, no mounts, no
# changes to the network the tenants share).
ROOT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "SETUID",
    "SETGID",
    "KILL",
    "SYS_CHROOT",
)
# Where the engine cannot remap (host networking), the image's unprivileged user instead,
# at home in /workspace: the image's own files belong to the remapped range on disk, which
# that user is not, and /workspace (mode 1777) is the one place both may write.
UNMAPPED_USER, UNMAPPED_HOME = "1000:1000", WORKSPACE


def create_kwargs(
    spec: ContainerSpec, host_name: str = "", sandbox_id: str | None = None
) -> dict[str, Any]:
    """Arguments for ``containers.create``: the whole hardening policy in one place.
    With ``sandbox_id`` the container joins that sandbox's network (sandboxes.py)."""
    mounts = [Mount(WORKSPACE, volume_name(spec.instance_id), type="volume")]
    if spec.hf_cache_dir:
        mounts.append(Mount(HF_CACHE_MOUNT, spec.hf_cache_dir, type="bind", read_only=True))
    # The customer's volumes (gpurental/volumes/), at the paths they chose.
    mounts += [Mount(path, name, type="volume") for name, path, _volume_id in spec.volumes]
    device_requests = []
    if spec.gpu_source == "nvml" and spec.gpu_uuids:
        device_requests.append(
            DeviceRequest(device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])
        )
    kwargs = {
        "image": spec.image,
        "command": list(spec.command) or None,
        "name": container_name(spec.instance_id),
        "hostname": f"gpurental-{spec.instance_id[:8]}",
        "labels": {**instance_labels(spec.instance_id, host_name), LABEL_SPEC: spec.fingerprint()},
        "environment": container_environment(spec),
        # Host ports: any free one, on the agent's bind address only (the gateway reaches it).
        "ports": {f"{port}/tcp": (spec.bind_address,) for port in spec.published_ports},
        "mounts": mounts,
        "nano_cpus": int(spec.cpu_count * 1_000_000_000),
        "mem_limit": f"{spec.memory_mb}m",
        "pids_limit": spec.pids_limit,
        "security_opt": ["no-new-privileges:true"],
        "cap_drop": ["ALL"],
        "cap_add": list(ROOT_CAPABILITIES),
        "privileged": False,
        "device_requests": device_requests,
        # On the tenant network (network.py): no traffic to other containers, the host
        # or private ranges; logs capped so a chatty kernel cannot fill the host's disk.
        "network": network.NETWORK,
        "sysctls": dict(network.SYSCTLS),
        "log_config": LogConfig(
            type="json-file", config={"max-size": LOG_MAX_SIZE, "max-file": str(LOG_MAX_FILES)}
        ),
    }
    if sandbox_id is not None:
        # The sandbox is on the tenant network and publishes the ports; its hostname is
        # the container's too (the engine refuses one of the container's own here).
        kwargs.update(
            network_mode=f"container:{sandbox_id}",
            network=None,
            ports=None,
            hostname=None,
            sysctls=None,
        )
    if spec.dedicated:
        kwargs.update(dedicated_kwargs(spec))
        if spec.host_network:
            kwargs["sysctls"] = None  # the host's own network: its settings, not ours
            kwargs["environment"] = {**kwargs["environment"], "HOME": UNMAPPED_HOME}
    return kwargs


# NVIDIA's recommendation for NCCL and multi-GPU frameworks in containers: memlock
# unlimited (RDMA pins large buffers) and a 64 MiB stack.
DEDICATED_STACK_BYTES = 67108864


def dedicated_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """What a leased whole host adds for multi-GPU and multi-node training. The rest of
    the hardening stays (no privileges, no capabilities, no-new-privileges, pids limit):

    - a large /dev/shm rather than ``--ipc=host``: NCCL's shared-memory transport needs
      room, not the host's IPC namespace, and the agent's own IPC stays apart;
    - memlock unlimited (or what the host can grant: base.grantable_memlock) and a
      64 MiB stack;
    - the host's /dev/infiniband nodes (found by the agent on its own /dev), rwm;
    - host networking only when the spec says so (the operator allowed it on this
      host): the container then uses the host's NICs and addresses directly.
    """
    memlock = spec.memlock_bytes
    extra: dict[str, Any] = {
        "ulimits": [
            Ulimit(name="memlock", soft=memlock, hard=memlock),
            Ulimit(name="stack", soft=DEDICATED_STACK_BYTES, hard=DEDICATED_STACK_BYTES),
        ]
    }
    if spec.shm_size_mb:
        extra["shm_size"] = f"{spec.shm_size_mb}m"
    if spec.infiniband_devices:
        extra["devices"] = [f"{path}:{path}:rwm" for path in spec.infiniband_devices]
    if spec.host_network:
        # Ports are the container's own on the host; nothing is published or proxied. The
        # engine cannot remap user namespaces with the host's network: the container runs
        # in the host's, as the image's unprivileged user, with no capabilities at all.
        extra.update(
            network_mode="host",
            network=None,
            ports=None,
            hostname=None,
            userns_mode="host",
            user=UNMAPPED_USER,
            cap_add=None,
        )
    return extra


class _ChunkReader:
    """A file-like reader over an iterator of byte chunks (the engine's archive stream),
    copying each byte once."""

    def __init__(self, chunks) -> None:
        self._chunks, self._chunk, self._at = iter(chunks), b"", 0

    def read(self, size: int = -1) -> bytes:
        parts, wanted = [], size
        while wanted != 0:
            if self._at >= len(self._chunk):
                self._chunk, self._at = next(self._chunks, b""), 0
                if not self._chunk:
                    break
            end = len(self._chunk) if wanted < 0 else min(len(self._chunk), self._at + wanted)
            parts.append(self._chunk[self._at : end])
            if wanted > 0:
                wanted -= end - self._at
            self._at = end
        return b"".join(parts)


@contextlib.contextmanager
def _engine_errors(action: str) -> Iterator[None]:
    """Turn docker SDK errors into RuntimeFailure with a message people can act on."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise RuntimeFailure(
            f"Docker Engine refused to {action}: {exc.explanation or exc}"
        ) from exc
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise RuntimeFailure(
            f"no Docker Engine answers on this host while trying to {action} ({exc}); "
            "start it (scripts/docker-engine.sh on a development machine)"
        ) from exc


class DockerRuntime:
    name = "docker"

    def __init__(
        self,
        *,
        client: docker.DockerClient | None = None,
        allow_pull: bool = False,
        ready_timeout_s: float = 120.0,
        stop_timeout_s: int = 10,
        host_name: str = "",
        sandbox_pool: int = 0,
        image_cache: ImageCache | None = None,
    ) -> None:
        if client is None:
            with _engine_errors("connect"):
                client = docker.from_env()
        self.client = client
        self.allow_pull = allow_pull
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.host_name = host_name
        # Network sandboxes made ahead of launches, ``sandbox_pool`` idle per set of ports.
        self.sandboxes = sandboxes.SandboxPool(client, size=sandbox_pool, host_name=host_name)
        # Customers' images pulled here, least recently used out (imagecache.py).
        self.image_cache = image_cache
        # Registry checks of cached customer images, asked while their containers start.
        self._checks = ThreadPoolExecutor(max_workers=4, thread_name_prefix="registry-check")

    def prepare_host(self) -> None:
        """The tenant network and its firewall (network.py); the agent calls it at start."""
        with _engine_errors("set up the tenant network"):
            network.ensure_network(self.client)
            network.private_prune(self.client)  # what an earlier agent left behind
        network.ensure_firewall()
        self.sandboxes.clear_leftovers()

    def remaps_users(self) -> bool:
        """Whether the engine remaps user namespaces (a container's root is then an
        unprivileged host uid); the agent's banner says so, and warns when it does not."""
        with _engine_errors("read the engine's settings"):
            options = self.client.info().get("SecurityOptions") or []
        return any("name=userns" in option for option in options)

    def close(self) -> None:
        """The agent is stopping: idle sandboxes go (instances keep theirs)."""
        self.sandboxes.close()

    # --- images -----------------------------------------------------------

    def ensure_image(self, image: str, progress: Progress, pull: PullPolicy | None = None) -> None:
        if pull is not None:
            self._ensure_customer_image(image, pull, progress)
            return
        with _engine_errors(f"look up image {image}"):
            try:
                self.client.images.get(image)
                return
            except docker.errors.ImageNotFound:
                pass
        if not self.allow_pull:
            # Many GPU sites cannot reach a registry (DESIGN.md): never try by default.
            raise ImageNotFound(
                f"image {image} is not on this host and pulling is off; "
                "build it with `make images` (or `docker load` it), then start again"
            )
        progress(f"pulling {image} (can take minutes)")
        with _engine_errors(f"pull image {image}"):
            try:
                self.client.images.pull(image)
            except docker.errors.NotFound as exc:
                raise ImageNotFound(
                    f"image {image} is neither on this host nor in its registry"
                ) from exc

    def _ensure_customer_image(self, image: str, policy: PullPolicy, progress: Progress) -> None:
        """A customer's image is pulled at every launch, cached or not: the registry checks
        the account's login each time (as Kubernetes's AlwaysPullImages), so a private
        image another account pulled here never runs for one that may not pull it. With
        the image cached, that is one manifest request; only changed layers download."""
        try:
            reference = imagerefs.parse(image)
        except imagerefs.BadReference as exc:
            raise RuntimeFailure(str(exc)) from exc
        pulls.pull(self.client.api, reference, policy, progress)
        with _engine_errors(f"look up image {image}"):
            try:
                size = int(self.client.images.get(image).attrs.get("Size") or 0)
            except docker.errors.ImageNotFound as exc:
                raise RuntimeFailure(f"the engine pulled {image} but does not list it") from exc
        if size > policy.max_bytes:
            self._remove_image(image)
            raise RuntimeFailure(pulls.too_large(image, size, policy.max_bytes))
        if self.image_cache is not None:
            self.image_cache.used(image, size)
            self._evict_images(keep=image)

    def _remove_image(self, image: str) -> bool:
        """Remove an image no container uses; False when one does (the engine refuses)."""
        try:
            self.client.images.remove(image, noprune=False)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError:
            return False  # in use (409), or the engine is busy: tried again after the next
        if self.image_cache is not None:
            self.image_cache.forget(image)
        return True

    def _evict_images(self, keep: str) -> None:
        for image in self.image_cache.over_limit():
            if image != keep:
                self._remove_image(image)

    # --- saving an instance as an image ---------------------------------------

    def save_image(
        self, instance_id: str, reference: str, auth: dict | None, progress
    ) -> tuple[int, str]:
        """Commit the instance's container as ``reference`` and push it with ``auth``;
        (size in bytes, the pushed manifest's digest). The platform's secrets in the
        container's environment are blanked in the image (a commit keeps the environment),
        and /workspace, a volume, is not in it."""
        ref = imagerefs.parse(reference)
        container = self._find(instance_id)
        if container is None:
            raise RuntimeFailure(
                f"instance {instance_id} has no container on this host (it was stopped "
                "before stopped containers were kept, or its host removed it): nothing to "
                "save; start it, then save"
            )
        with _engine_errors(f"commit the container of instance {instance_id}"):
            env = [
                f"{entry.split('=', 1)[0]}=" if entry.split("=", 1)[0] in SECRET_ENV else entry
                for entry in container.attrs["Config"].get("Env") or []
            ]
            base = self.client.images.get(container.attrs["Image"])
            labels = {**(base.attrs["Config"].get("Labels") or {}), LABEL_SAVED_FROM: instance_id}
            progress(f"committing the container of instance {instance_id}")
            image = container.commit(
                repository=ref.pull_name, tag=ref.tag, conf={"Env": env, "Labels": labels}
            )
        size = int(image.attrs.get("Size") or 0)
        digest = self._push(ref, auth, progress)
        if self.image_cache is not None:
            self.image_cache.used(str(ref), size)
        return size, digest

    def _push(self, ref: imagerefs.Reference, auth: dict | None, progress) -> str:
        layers: dict[str, list[int]] = {}
        digest = ""
        with _engine_errors(f"push {ref}"):
            for line in self.client.api.push(
                ref.pull_name, tag=ref.tag, auth_config=auth or None, stream=True, decode=True
            ):
                if "error" in line:
                    detail = (line.get("errorDetail") or {}).get("message") or line["error"]
                    raise RuntimeFailure(
                        f"the platform's registry refused the push of {ref}: {detail}"
                    )
                digest = (line.get("aux") or {}).get("Digest", digest)
                detail = line.get("progressDetail") or {}
                if line.get("id") and detail.get("total"):
                    layers[line["id"]] = [int(detail.get("current", 0)), int(detail["total"])]
                elif line.get("id") and line.get("status") in ("Pushed", "Layer already exists"):
                    entry = layers.setdefault(line["id"], [0, 0])
                    entry[0] = entry[1]
                sent = sum(c for c, _ in layers.values())
                total = sum(t for _, t in layers.values())
                percent = round(100 * sent / total, 1) if total else None
                progress(f"pushing {ref}: {sent / 1e6:.1f}/{total / 1e6:.1f} MB", percent)
        if not digest:
            raise RuntimeFailure(f"the push of {ref} ended without the registry's digest")
        return digest

    # --- lifecycle ----------------------------------------------------------

    def start(self, spec: ContainerSpec, progress: Progress) -> Started:
        try:
            return self._start(spec, progress)
        finally:
            # Only now, with this launch over, does the pool make the next sandboxes.
            self.sandboxes.replenish()

    def _start(self, spec: ContainerSpec, progress: Progress) -> Started:
        container = self._find(spec.instance_id)
        if container is not None and self._kept_for(container, spec):
            container = self._start_kept(container, progress)
        if container is not None and not self._matches(container, spec):
            # The control plane's spec is authoritative: a stopped leftover, or a
            # container made for other GPUs or another token, must not be reused.
            progress(
                "replacing the stopped container with a fresh one from its image (/workspace "
                "is kept)"
                if container.status in _KEPT_STATES
                else "replacing an outdated container (the workspace is kept)"
            )
            self._remove_container(container)
            container = None
        check = None
        if container is None:
            # No line of its own: ensure_image says "pulling" when it pulls; a cached image
            # (nearly every launch) goes straight to "creating". A customer's image cached
            # here is checked with its registry while the container starts (below).
            check = self._registry_check(spec, progress)
            if check is None:
                self.ensure_image(spec.image, progress, pull=spec.pull)
            container = self._create_and_start(spec, progress)
        try:
            started = self._published(container, spec)
            progress(f"waiting for JupyterLab on {started.host}:{started.port}")
            ready_s = wait_for_jupyter(
                started.host,
                started.port,
                spec.token,
                self.ready_timeout_s,
                check_alive=lambda: self._check_running(container, spec),
            )
            if check is not None and not self._still_current(check, container):
                progress("replacing the container: its registry has a newer image under this tag")
                self._remove_container(container)
                return self._start(spec, progress)
        except RuntimeFailure:
            # Leave no half-started container behind; the workspace volume stays,
            # it may hold the user's files from earlier runs. (A registry that refused
            # the account ends here too: the container never ran for them.)
            self._remove_container(container)
            raise
        return replace(started, ready_s=ready_s)

    def _registry_check(self, spec: ContainerSpec, progress: Progress) -> Future | None:
        """For a customer's image already on this host: its pull (the registry's check of
        the account's login, and of the tag's current digest), asked in the background
        while the container starts, so that a cached launch does not wait on the registry
        first. None where the image must be pulled before anything can start."""
        if spec.pull is None:
            return None
        with _engine_errors(f"look up image {spec.image}"):
            try:
                self.client.images.get(spec.image)
            except docker.errors.ImageNotFound:
                return None
        progress(f"checking {spec.image} with its registry (it is cached on this host)")
        return self._checks.submit(
            self._ensure_customer_image, spec.image, spec.pull, ignore_progress
        )

    def _still_current(self, check: Future, container: Container) -> bool:
        """The registry's answer: RuntimeFailure if it refused; False if the tag now names
        another image than the container runs (it was pulled: start that one)."""
        check.result()
        with _engine_errors("inspect the container"):
            container.reload()
            current = self.client.images.get(container.attrs["Config"]["Image"]).id
        return current == container.attrs["Image"]

    def stop(self, instance_id: str, keep_container: bool = False, park: bool = False) -> None:
        container = self._find(instance_id)
        if container is None:
            if not park:
                self.sandboxes.remove_for(instance_id)  # left by a start that failed midway
            return
        if not keep_container:
            self._remove_container(container)
            return
        # Kept: stopped, still created with its image, mounts and the customer's changes
        # to its filesystem, which ``save_image`` commits; a start for another run (new
        # secrets, other GPUs) replaces it. Parked (a group's warm replica), its network
        # sandbox stays up as well, so that starting it again skips every step but that.
        with _engine_errors(f"stop container {container.name}"):
            container.stop(timeout=self.stop_timeout_s)
        if not park:
            self.sandboxes.remove_for(instance_id)

    def remove(self, instance_id: str) -> None:
        self.stop(instance_id)
        action = f"remove the workspace volume of instance {instance_id}"
        with _engine_errors(action), contextlib.suppress(docker.errors.NotFound):
            self.client.volumes.get(volume_name(instance_id)).remove()

    def list_instances(self) -> dict[str, str]:
        managed = {"label": [f"{LABEL_MANAGED}=true"]}
        if self.host_name:
            managed["label"].append(f"{LABEL_HOST}={self.host_name}")
        with _engine_errors("list instances"):
            # ignore_removed: one removed between the engine's list and its inspect (a stop,
            # a sandbox the filler dropped) is simply not listed, not a failed heartbeat.
            containers = self.client.containers.list(all=True, filters=managed, ignore_removed=True)
            volumes = self.client.volumes.list(filters=managed)
            self.sandboxes.collect_orphans({sandboxes.sandbox_of(c.attrs) for c in containers})
        states = {(vol.attrs.get("Labels") or {}).get(LABEL_INSTANCE): "stopped" for vol in volumes}
        states.update({c.labels.get(LABEL_INSTANCE): c.status for c in containers})
        states.pop(None, None)
        return states

    def _disk_usage(self, tries: int = 10) -> dict:
        """``docker system df``. The engine runs one at a time and refuses a second ("a disk
        usage operation is already running"), such as another agent's on the same engine:
        wait for it rather than fail this round."""
        for attempt in range(tries):
            try:
                return self.client.api.df()
            except docker.errors.APIError as exc:
                if "already running" not in str(exc) or attempt == tries - 1:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def workspace_usage(self) -> dict[str, int]:
        """Bytes each instance's /workspace volume holds, as the engine measures it."""
        with _engine_errors("measure the workspaces"):
            volumes = self._disk_usage().get("Volumes") or []
        usage = {}
        for volume in volumes:
            instance_id = (volume.get("Labels") or {}).get(LABEL_INSTANCE)
            size = (volume.get("UsageData") or {}).get("Size", -1)
            mine = (volume.get("Labels") or {}).get(LABEL_HOST, "") == self.host_name
            if instance_id and size >= 0 and mine:
                usage[instance_id] = size
        return usage

    def volume_usage(self) -> dict[str, int]:
        """Bytes each of the customers' volumes here holds ({volume id: bytes})."""
        with _engine_errors("measure the volumes"):
            volumes = self._disk_usage().get("Volumes") or []
        usage = {}
        for volume in volumes:
            labels = volume.get("Labels") or {}
            size = (volume.get("UsageData") or {}).get("Size", -1)
            if (
                labels.get(LABEL_VOLUME)
                and size >= 0
                and labels.get(LABEL_HOST, "") == self.host_name
            ):
                usage[labels[LABEL_VOLUME]] = size
        return usage

    def volume_remove(self, name: str) -> None:
        """A deleted volume's data goes (the engine refuses while a container mounts it)."""
        if not name.startswith("gpurental-vol-"):
            raise RuntimeFailure(f"{name!r} is not a customer's volume")
        with _engine_errors(f"remove volume {name}"), contextlib.suppress(docker.errors.NotFound):
            self.client.volumes.get(name).remove()

    # --- snapshots: a volume's files as a tar (gpurental/agent/volumesnap.py) ---------

    def _helper(self, name: str, image: str, *, read_only: bool) -> Container:
        """A container that never runs, with the volume at /v: the engine reads and writes
        its files through it (GET and PUT /containers/{id}/archive), with no process of
        ours inside, and no network."""
        if not name.startswith(("gpurental-vol-", "gpurental-ws-")):
            raise RuntimeFailure(f"{name!r} is not a customer's volume or workspace")
        with _engine_errors(f"make a helper container for volume {name}"):
            return self.client.containers.create(
                image,
                command=["true"],
                mounts=[Mount("/v", name, type="volume", read_only=read_only)],
                network_disabled=True,
                labels={LABEL_MANAGED: "true", LABEL_HOST: self.host_name or ""},
            )

    def _remap_base(self) -> tuple[int, int]:
        """The host ids the engine maps a container's root to (userns-remap: its data root
        ends in "<uid>.<gid>"), or (0, 0)."""
        with _engine_errors("read the engine's settings"):
            root = os.path.basename(str(self.client.info().get("DockerRootDir", "")))
        uid, _, gid = root.partition(".")
        return (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else (0, 0)

    def volume_archive(self, name: str, image: str, out) -> None:
        """Write the volume's files as a tar to ``out`` (a binary file), owners as its
        containers see them (the engine's archive names the host's remapped ids)."""
        import tarfile

        uid_base, gid_base = self._remap_base()
        helper = self._helper(name, image, read_only=True)
        try:
            with _engine_errors(f"read volume {name}"):
                stream, _stat = helper.get_archive("/v/.", chunk_size=1024 * 1024)
                source = _ChunkReader(stream)
                with (
                    tarfile.open(fileobj=source, mode="r|") as tar_in,
                    tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar_out,
                ):
                    for member in tar_in:
                        if member.uid >= uid_base:
                            member.uid -= uid_base
                        if member.gid >= gid_base:
                            member.gid -= gid_base
                        member.uname = member.gname = ""
                        data = tar_in.extractfile(member) if member.isfile() else None
                        tar_out.addfile(member, data)
        finally:
            with contextlib.suppress(docker.errors.APIError):
                helper.remove(force=True)

    def volume_unarchive(self, name: str, volume_id: str, image: str, tar_file) -> None:
        """Make the customer's volume ``name`` and unpack the tar in ``tar_file`` into it."""
        labels = {LABEL_VOLUME: volume_id, LABEL_MANAGED: "true"}
        if self.host_name:
            labels[LABEL_HOST] = self.host_name
        self._unpack(name, labels, image, tar_file)

    def _unpack(self, name: str, labels: dict, image: str, tar_file) -> None:
        with _engine_errors(f"create volume {name}"):
            self.client.volumes.create(name, labels=labels)
        helper = self._helper(name, image, read_only=False)
        try:
            with _engine_errors(f"fill volume {name}"):
                if not helper.put_archive("/v", tar_file):
                    raise RuntimeFailure(f"the engine did not unpack the snapshot into {name}")
        finally:
            with contextlib.suppress(docker.errors.APIError):
                helper.remove(force=True)

    def logs_tail(self, instance_id: str, lines: int = 30) -> str:
        container = self._find(instance_id)
        if container is None:
            return ""
        return self._logs(container, lines)

    # --- helpers ------------------------------------------------------------

    def _find(self, instance_id: str) -> Container | None:
        with _engine_errors(f"look up the container of instance {instance_id}"):
            try:
                return self.client.containers.get(container_name(instance_id))
            except docker.errors.NotFound:
                return None

    @staticmethod
    def _matches(container: Container, spec: ContainerSpec) -> bool:
        return (
            container.status == "running" and container.labels.get(LABEL_SPEC) == spec.fingerprint()
        )

    @staticmethod
    def _kept_for(container: Container, spec: ContainerSpec) -> bool:
        """A stopped container made for exactly this spec (same GPUs, same run secrets)."""
        return (
            container.status in _KEPT_STATES
            and container.labels.get(LABEL_SPEC) == spec.fingerprint()
        )

    def _start_kept(self, container: Container, progress: Progress) -> Container | None:
        """Start a kept container again; None (it is removed) if the engine refuses."""
        progress("starting the kept container (no image or creation step)")
        try:
            with _engine_errors(f"start container {container.name}"):
                if (sandbox_id := sandboxes.sandbox_of(container.attrs)) is not None:
                    self.client.api.start(sandbox_id)  # after a reboot it is stopped too
                container.start()
                container.reload()
        except RuntimeFailure as exc:
            progress(f"the kept container would not start ({exc}); creating a new one")
            self._remove_container(container)
            return None
        return container

    def _ensure_volume(self, instance_id: str) -> None:
        name = volume_name(instance_id)
        with _engine_errors(f"create volume {name}"):
            # One call: the engine answers with the volume that exists, labels and files
            # as they are, or makes it.
            self.client.volumes.create(name, labels=instance_labels(instance_id, self.host_name))

    def _restore_workspace(self, spec: ContainerSpec, progress: Progress) -> None:
        """A new instance's /workspace from a snapshot (its ``workspace_from``), once: when
        the host has no workspace for it yet. The download's digest is checked first."""
        from gpurental.agent.volumesnap import fetch_verified  # it reads this module

        name = volume_name(spec.instance_id)
        with _engine_errors(f"look up volume {name}"):
            try:
                self.client.volumes.get(name)
                return  # made before: the snapshot went in then
            except docker.errors.NotFound:
                pass
        url, sha256 = spec.workspace_from
        progress("restoring /workspace from its snapshot")
        try:
            with fetch_verified(url, sha256) as tar:
                labels = instance_labels(spec.instance_id, self.host_name)
                try:
                    self._unpack(name, labels, spec.image, tar)
                except BaseException:
                    with contextlib.suppress(docker.errors.APIError):
                        self.client.volumes.get(name).remove(force=True)
                    raise
        except (ValueError, requests.exceptions.RequestException) as exc:
            raise RuntimeFailure(
                f"/workspace could not be restored from its snapshot: {exc}"
            ) from exc

    def _ensure_customer_volumes(self, spec: ContainerSpec) -> None:
        for name, _path, volume_id in spec.volumes:
            with _engine_errors(f"create volume {name}"):
                labels = {LABEL_VOLUME: volume_id, LABEL_MANAGED: "true"}
                if self.host_name:
                    labels[LABEL_HOST] = self.host_name
                self.client.volumes.create(name, labels=labels)

    def _create_and_start(self, spec: ContainerSpec, progress: Progress) -> Container:
        if spec.hf_cache_dir and not os.path.isdir(spec.hf_cache_dir):
            raise RuntimeFailure(
                f"the Hugging Face cache {spec.hf_cache_dir} does not exist on this host; "
                "create it or unset the host's model cache setting"
            )
        if spec.workspace_from is not None:
            self._restore_workspace(spec, progress)
        self._ensure_volume(spec.instance_id)
        self._ensure_customer_volumes(spec)
        progress(f"creating container from {spec.image}")
        sandbox = self.sandboxes.claim(spec)
        if sandbox is not None:
            try:
                return self._create_and_start_in(spec, sandbox.id)
            except RuntimeFailure as exc:  # the container and the sandbox are gone
                if not sandboxes.failed_on_the_sandbox(str(exc)):
                    raise  # the container's own failure: it would fail the same without
                progress(f"info: the network sandbox failed ({exc}); making the container's own")
                self.sandboxes.flush()  # the others are likely dead too (an engine restart)
        with _engine_errors("set up the tenant network"):
            network.ensure_network(self.client)
        return self._create_and_start_in(spec, None)

    def _create_and_start_in(self, spec: ContainerSpec, sandbox_id: str | None) -> Container:
        with _engine_errors(f"create the container of instance {spec.instance_id}"):
            try:
                container = self.client.containers.create(
                    **create_kwargs(spec, self.host_name, sandbox_id)
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    self.sandboxes.remove_for(spec.instance_id)
                    raise
                # Another start of the same instance won the race; use its container.
                container = self.client.containers.get(container_name(spec.instance_id))
                if sandbox_id is not None and sandboxes.sandbox_of(container.attrs) != sandbox_id:
                    self.sandboxes.remove_quietly(sandbox_id)  # claimed here, joined by none
        try:
            with _engine_errors(f"start the container of instance {spec.instance_id}"):
                container.start()
            # After the start, so that it is always eth1 (the tenant network is eth0).
            if spec.private_network is not None:
                with _engine_errors("join the account's private network"):
                    try:
                        # The container that runs: in the 409 case another start's, with
                        # its own sandbox (or none), not the one claimed here.
                        owner = sandboxes.sandbox_of(container.attrs) or container.id
                        network.private_join(self.client, spec.private_network, owner)
                    except network.NetworkSetupError as exc:
                        raise RuntimeFailure(str(exc)) from exc
        except RuntimeFailure as exc:
            self._remove_container(container)
            if _NO_GPU_DRIVER in str(exc):
                raise RuntimeFailure(
                    "this host's Docker Engine cannot hand GPUs to containers: install the "
                    "NVIDIA Container Toolkit (1.17.8 or newer) and restart Docker"
                ) from exc
            raise
        return container

    def _published(self, container: Container, spec: ContainerSpec) -> Started:
        """Read back the host ports Docker picked, JupyterLab's and the others."""
        with _engine_errors("inspect the container"):
            container.reload()
            if (sandbox_id := sandboxes.sandbox_of(container.attrs)) is not None:
                # The sandbox publishes the ports of the network the container joined.
                published = self.client.api.inspect_container(sandbox_id)["NetworkSettings"]
            else:
                published = container.attrs["NetworkSettings"]
        published = published["Ports"] or {}
        if spec.host_network:  # the host's own stack: each port is itself on the host
            published = {f"{p}/tcp": [{"HostPort": str(p)}] for p in spec.published_ports}
        ports = {}
        for port in spec.published_ports:
            bindings = published.get(f"{port}/tcp")
            if not bindings:
                self._check_running(container, spec)
                raise RuntimeFailure(f"Docker published no port for {port}/tcp")
            ports[port] = int(bindings[0]["HostPort"])
        return Started(container.id, spec.bind_address, ports[spec.container_port], ports=ports)

    def _check_running(self, container: Container, spec: ContainerSpec) -> None:
        with _engine_errors("inspect the container"):
            container.reload()
        state = container.attrs["State"]
        if state["Status"] not in _GONE_STATES:
            return
        reason = f"the container exited with code {state['ExitCode']} while starting"
        if state.get("OOMKilled"):
            reason += f" (out of memory: the plan allows {spec.memory_mb} MB)"
        raise RuntimeFailure(f"{reason}; last log lines:\n{self._logs(container, 20)}")

    @staticmethod
    def _logs(container: Container, lines: int) -> str:
        with _engine_errors("read the container logs"):
            try:
                return container.logs(tail=lines).decode("utf-8", "replace").rstrip()
            except docker.errors.NotFound:
                return ""

    def _remove_container(self, container: Container) -> None:
        """Stop gracefully (JupyterLab saves and shuts kernels down), then remove; its
        network sandbox, if it joined one, goes with it, and so does its private network
        when no other container is on it."""
        private = self._private_networks_of(container)
        with _engine_errors(f"remove container {container.name}"):
            try:
                # (Stopping a container that is not running is a harmless no-op.)
                container.stop(timeout=self.stop_timeout_s)
                # v: the image's anonymous volumes go too (/workspace is a named one: kept).
                container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
        if (instance_id := container.labels.get(LABEL_INSTANCE)) is not None:
            self.sandboxes.remove_for(instance_id)
        # Its own networks; with none known (its sandbox went at a stop that kept it),
        # any private network left without containers.
        network.private_prune(self.client, private or None)

    def _private_networks_of(self, container: Container) -> list[str]:
        """The private networks the container is on (through its sandbox, if it has one)."""
        try:
            container.reload()
            attrs = container.attrs
            if (sandbox_id := sandboxes.sandbox_of(attrs)) is not None:
                attrs = self.client.api.inspect_container(sandbox_id)
        except docker.errors.APIError:
            return []
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        return [name for name in networks if name.startswith("gpurental-private-")]
