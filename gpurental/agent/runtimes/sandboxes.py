"""Network sandboxes made ahead of launches: the tenant network's setup off the launch path.

Starting a container on a user-defined bridge (the tenant network, network.py) costs the
Docker Engine ~40–60 ms more than on its default bridge: the veth pair, the embedded DNS
resolver and its rules inside the container's namespace. On this path it is the largest
share of what the platform adds to a launch. So, like Kubernetes' pause container, a
*sandbox* holds the network namespace: a tiny sleeping container on the tenant network
that publishes the instance's ports on the agent's bind address. The instance's container
joins it (``network_mode="container:<sandbox>"``) and starts without any network setup;
its firewall is the sandbox's (the same bridge, the same rules, no other container shares
it).

The pool keeps ``size`` idle sandboxes per (image, published ports, bind address): idle
ones are named ``gpurental-pool-<random>``; a start claims one by renaming it
``gpurental-net-<instance id>`` (one thread at a time takes from the pool, so no two
starts share one), and a filler thread makes its replacement once that start is over, so
that the filler's work never competes with a launch. With none idle (a burst of launches,
ports never seen before, a pool of size 0) a start makes its container on the tenant
network directly, as before. The sandbox goes with its instance's container; idle ones go
when the agent stops, and leftovers of an earlier agent go when the pool starts.

A sandbox runs the instance's own image (it is on the host by then), as its image's user,
with its entrypoint replaced by ``sleep infinity`` (stopped with SIGKILL: it keeps
nothing): no capabilities, no new privileges, a read-only root, 8 processes and 32 MiB at
most. An image without ``sleep`` gets no pool. A start whose sandbox fails (the engine
restarted and stopped the pool's sandboxes, say) empties the pool, which the filler then
makes again, and sets up its container's own network.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import OrderedDict

import docker.errors

from . import network
from .base import LABEL_HOST, ContainerSpec, check_instance_id

log = logging.getLogger(__name__)

LABEL_SANDBOX = "gpurental.sandbox"  # on every sandbox, idle or claimed; the value: its pool key
POOL_PREFIX = "gpurental-pool-"
CLAIMED_PREFIX = "gpurental-net-"
MAX_KEYS = 4  # sets of ports kept warm at once: the most recently launched
FAILED_KEY_BACKOFF_S = 300.0  # an image whose sandbox would not start is not tried again soon
ORPHAN_AGE_S = 120.0  # a claimed sandbox no container joined, this old, goes
SETTLE_S = 1.0  # a new sandbox must still run this long after its start to be pooled
# The filler waits this long after a start: the launch's last steps (its report, the
# customer's link, JupyterLab's first pages through the gateway) come first.
REFILL_DELAY_S = 2.0

Key = tuple[str, tuple[int, ...], str]


def sandbox_name(instance_id: str) -> str:
    return f"{CLAIMED_PREFIX}{check_instance_id(instance_id)}"


def key_of(spec: ContainerSpec) -> Key:
    return (spec.image, tuple(spec.published_ports), spec.bind_address)


def sandbox_of(attrs: dict) -> str | None:
    """The id of the sandbox whose network a container joined, from its inspect data."""
    mode = (attrs.get("HostConfig") or {}).get("NetworkMode") or ""
    return mode.removeprefix("container:") if mode.startswith("container:") else None


# How the engine refuses a container whose sandbox is stopped or gone (Docker 20.10 – 28).
_SANDBOX_REFUSALS = ("cannot join network of a non running container", "no such container")


def failed_on_the_sandbox(message: str) -> bool:
    """Whether the engine refused a start because of its sandbox, not the container."""
    lowered = message.lower()
    return any(refusal in lowered for refusal in _SANDBOX_REFUSALS)


def _label(key: Key) -> str:
    image, ports, bind = key
    return f"{image}|{','.join(map(str, ports))}|{bind}"


class SandboxPool:
    """Idle sandboxes per key, the thread that refills them, and their clean-up."""

    def __init__(self, client, *, size: int, host_name: str = "") -> None:
        self.client = client
        self.size = max(0, size)
        self.host_name = host_name
        self._lock = threading.Lock()
        self._idle: OrderedDict[Key, list] = OrderedDict()  # most recently wanted last
        self._failed: dict[Key, float] = {}
        self._claimed_at: dict[str, float] = {}  # name → when, so GC spares a start under way
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._filler: threading.Thread | None = None
        self.made = 0  # sandboxes made by this pool (the tests read it)

    # --- a start ------------------------------------------------------------

    def claim(self, spec: ContainerSpec):
        """An idle sandbox for ``spec``, now named after its instance; None if none is idle
        (the caller then creates its container on the tenant network itself)."""
        if self.size == 0 or spec.host_network:
            return None
        key = key_of(spec)
        with self._lock:
            idle = self._idle.setdefault(key, [])
            self._idle.move_to_end(key)
            sandbox = idle.pop() if idle else None
        if sandbox is None:
            return None
        name = sandbox_name(spec.instance_id)
        with self._lock:  # before the rename: a heartbeat's collect_orphans spares it
            self._claimed_at[name] = time.monotonic()
        try:
            sandbox.rename(name)
        except docker.errors.APIError as exc:
            log.warning("could not claim sandbox %s for %s: %s", sandbox.name, name, exc)
            with self._lock:
                self._claimed_at.pop(name, None)
            self.remove_quietly(sandbox.id)
            return None
        return sandbox

    def replenish(self) -> None:
        """Refill the pools soon (REFILL_DELAY_S after a start is over: the filler never
        races a launch, nor the moments after it)."""
        if self.size == 0:
            return
        self._ensure_filler()
        self._wake.set()

    def flush(self) -> None:
        """Drop every idle sandbox (one failed: after an engine restart all are stopped)."""
        with self._lock:
            idle = [s for sandboxes in self._idle.values() for s in sandboxes]
            for sandboxes in self._idle.values():
                sandboxes.clear()
        for sandbox in idle:
            self.remove_quietly(sandbox.id)

    def remove_for(self, instance_id: str) -> None:
        """The instance's sandbox goes (its container has gone)."""
        name = sandbox_name(instance_id)
        with self._lock:
            self._claimed_at.pop(name, None)
        self.remove_quietly(name)

    # --- the filler -------------------------------------------------------------

    def _ensure_filler(self) -> None:
        with self._lock:
            if self._filler is None or not self._filler.is_alive():
                self._filler = threading.Thread(
                    target=self._fill_loop, name="sandboxes", daemon=True
                )
                self._filler.start()

    def _fill_loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait()
            if self._closed.wait(REFILL_DELAY_S):
                break
            self._wake.clear()
            while not self._closed.is_set() and (key := self._short_key()) is not None:
                sandbox = self._make(key)
                if sandbox is None:
                    continue
                with self._lock:
                    if key in self._idle and not self._closed.is_set():
                        self._idle[key].append(sandbox)
                        sandbox = None
                if sandbox is not None:  # the key was dropped (or the pool closed) meanwhile
                    self.remove_quietly(sandbox.id)

    def _short_key(self) -> Key | None:
        """A key whose pool is short of ``size``; keys beyond the newest MAX_KEYS are dropped."""
        now = time.monotonic()
        dropped = []
        with self._lock:
            while len(self._idle) > MAX_KEYS:
                dropped.extend(self._idle.popitem(last=False)[1])
            short = next(
                (
                    key
                    for key, idle in reversed(self._idle.items())
                    if len(idle) < self.size and now >= self._failed.get(key, 0.0)
                ),
                None,
            )
        for sandbox in dropped:
            self.remove_quietly(sandbox.id)
        return short

    def _make(self, key: Key):
        image, ports, bind = key
        labels = {LABEL_SANDBOX: _label(key)}
        if self.host_name:
            labels[LABEL_HOST] = self.host_name
        sandbox = None
        try:
            sandbox = self.client.containers.create(
                image=image,
                entrypoint=["sleep", "infinity"],
                command=[],
                # sleep as PID 1 ignores SIGTERM: a stop (the engine's own shutdown too)
                # would wait out its timeout. A sandbox keeps nothing: kill it at once.
                stop_signal="SIGKILL",
                name=f"{POOL_PREFIX}{uuid.uuid4().hex[:12]}",
                hostname="gpurental",
                labels=labels,
                # Never any GPU (a CUDA image says NVIDIA_VISIBLE_DEVICES=all, which an
                # engine whose default runtime is nvidia would honour), no health check.
                environment={"NVIDIA_VISIBLE_DEVICES": "void"},
                device_requests=[],
                healthcheck={"test": ["NONE"]},
                network=network.NETWORK,
                sysctls=dict(network.SYSCTLS),
                ports={f"{port}/tcp": (bind,) for port in ports},
                cap_drop=["ALL"],
                # Not the image's user (root, for customers): the sandbox only sleeps.
                user="65534:65534",
                security_opt=["no-new-privileges:true"],
                privileged=False,
                read_only=True,
                pids_limit=8,
                mem_limit="32m",
                nano_cpus=100_000_000,
            )
            sandbox.start()
            # Still running a moment later? (Its sleep may refuse "infinity", say.) The
            # filler works between launches, so the wait costs no launch anything.
            self._closed.wait(SETTLE_S)
            sandbox.reload()
            if sandbox.status != "running":
                raise docker.errors.DockerException(f"it {sandbox.status} right after its start")
        except (docker.errors.DockerException, OSError) as exc:
            log.warning("no sandbox for %s (%s); its launches set up their own network", key, exc)
            with self._lock:
                self._failed[key] = time.monotonic() + FAILED_KEY_BACKOFF_S
            if sandbox is not None:
                self.remove_quietly(sandbox.id)
            return None
        self.made += 1
        return sandbox

    # --- clean-up -----------------------------------------------------------------

    def _mine(self) -> dict:
        filters = {"label": [LABEL_SANDBOX]}
        if self.host_name:
            filters["label"].append(f"{LABEL_HOST}={self.host_name}")
        return filters

    def _listed(self) -> list:
        containers = self.client.containers.list(
            all=True, filters=self._mine(), ignore_removed=True
        )
        # Without a host name, only sandboxes without one: another agent's stay its own.
        return [c for c in containers if self.host_name or LABEL_HOST not in c.labels]

    def clear_leftovers(self) -> None:
        """At the agent's start: idle sandboxes of an earlier run go (they may be stopped,
        or made for images and ports no longer launched)."""
        with contextlib.suppress(docker.errors.DockerException, OSError):
            for sandbox in self._listed():
                if sandbox.name.startswith(POOL_PREFIX):
                    self.remove_quietly(sandbox.id)

    def collect_orphans(self, joined: set[str]) -> None:
        """Claimed sandboxes that no container joined (``joined``: the sandbox ids the
        instance containers use) go once their claim is ORPHAN_AGE_S old: a crash between
        the claim and the container's creation, or a start that ended on a container of
        its own. Removed by id: the name may meanwhile be a newer claim's."""
        now = time.monotonic()
        for sandbox in self._listed():
            if not sandbox.name.startswith(CLAIMED_PREFIX) or sandbox.id in joined:
                continue
            with self._lock:
                claimed = self._claimed_at.get(sandbox.name)
            if claimed is not None and now - claimed < ORPHAN_AGE_S:
                continue
            log.info("removing sandbox %s: no instance's container joined it", sandbox.name)
            self.remove_quietly(sandbox.id)

    def close(self) -> None:
        """Stop filling and remove the idle sandboxes (claimed ones stay with their instances)."""
        self._closed.set()
        self._wake.set()
        if self._filler is not None:
            self._filler.join(timeout=30)
        self.flush()

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

    def remove_quietly(self, name_or_id: str) -> None:
        try:
            self.client.api.remove_container(name_or_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as exc:
            log.warning("could not remove sandbox %s: %s", name_or_id, exc)
