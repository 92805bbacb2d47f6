"""Container runtimes: how the agent runs one instance's JupyterLab on its host.

One small interface, one adapter per runtime:

- ``DockerRuntime`` (``runtimes/docker.py``): one hardened container per instance
  on the local Docker Engine, ``/workspace`` on a named volume. The real thing.
- ``ProcessRuntime`` (``runtimes/process.py``): JupyterLab as a local subprocess,
  for machines without Docker (a first ``make demo`` on a laptop). No isolation
  and no resource limits: for demos and development only.

``Runtime`` (what the agent's host tasks call)::

    name                              "docker" or "process"
    ensure_image(image, progress)     the image is on this host, or ImageNotFound
    start(spec, progress) -> Started  create and start the instance and return once
                                      JupyterLab answers with the token (and refuses
                                      without it). Repeating it is harmless. A kept
                                      container made for the very same spec is only
                                      started again (no image or creation step).
    stop(instance_id, keep_container, park)
                                      the container or process goes; /workspace stays.
                                      keep_container: stop it but keep it created, its
                                      filesystem ready to be saved as an image (docker
                                      only); park: its network sandbox stays up too (a
                                      group's warm replica)
    remove(instance_id)               container or process and /workspace go
    list_instances() -> {id: state}   Docker's states ("running", "exited", …), plus
                                      "stopped" for a workspace with nothing running
    workspace_usage() -> {id: bytes}  what each /workspace holds (the plan's disk_gb is
                                      enforced on it by the control plane)
    logs_tail(instance_id, lines)     the last lines of the instance's output

Every method takes plain values and returns plain values: this package imports no
Django, and the agent gets everything it needs in the task message. Errors are
``ContainerRuntimeError`` subclasses whose message says what to do about them.
``progress`` receives short human-readable lines for the instance's event log.
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import json
import os
import re
import resource
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

# A progress line for the customer; a pull of their own image adds its figures (pull=…).
Progress = Callable[..., None]

GPU_SOURCES = ("nvml", "simulated")
LABEL_INSTANCE = "gpurental.instance"
LABEL_MANAGED = "gpurental.managed"
LABEL_SPEC = "gpurental.spec"
LABEL_HOST = "gpurental.host"

# Address to probe when JupyterLab listens on every address.
_WILDCARD_ADDRESSES = {"0.0.0.0", "::", ""}  # noqa: S104 (a comparison, not a bind)


class ContainerRuntimeError(Exception):
    """A runtime problem; ``str(error)`` is meant for the user or operator."""


class ImageNotFound(ContainerRuntimeError):
    """The instance's image is not on this host (and may not be pulled)."""


class RuntimeFailure(ContainerRuntimeError):
    """The instance could not be started, or died while starting."""


@dataclass(frozen=True)
class PullPolicy:
    """How a customer's own image is pulled (the spec's ``pull``): the operator's size and
    time limits, and the account's registry login, if it saved one."""

    max_bytes: int
    timeout_s: float
    auth: dict | None = field(default=None, repr=False)


_PRIVATE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.internal$")


@dataclass(frozen=True)
class PrivateNet:
    """The account's private network on this host (gpurental/networks): a Docker bridge of
    its own, its containers reachable from each other only, under ``names``."""

    index: int
    subnet: str
    names: tuple[str, ...]

    @property
    def network_name(self) -> str:
        return f"gpurental-private-{self.index}"

    @property
    def bridge(self) -> str:
        return f"gpr-p-{self.index}"  # at most 12 characters: a Linux interface name

    @classmethod
    def from_spec(cls, data: dict) -> PrivateNet:
        index = data.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1_000_000:
            raise ValueError(f"private_network index must be 0-999999, not {index!r}")
        try:
            subnet = ipaddress.ip_network(str(data.get("subnet")))
        except ValueError as exc:
            raise ValueError(f"private_network subnet: {exc}") from exc
        if subnet.version != 4 or not subnet.is_private or subnet.prefixlen > 28:
            raise ValueError(f"private_network subnet {subnet} is not a private IPv4 /28 or larger")
        names = tuple(str(n) for n in data.get("names") or ())
        if not 1 <= len(names) <= 4 or not all(_PRIVATE_NAME.match(n) for n in names):
            raise ValueError(f"private_network names must be 1-4 <label>.internal, not {names!r}")
        return cls(index, str(subnet), names)


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to run one instance, as sent by the control plane."""

    instance_id: str  # uuid string; also names the container, volume and directory
    image: str  # e.g. "gpurental/jupyter-cpu:latest"
    token: str  # JupyterLab token
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    gpu_source: str  # "nvml" or "simulated"
    cpu_count: float
    memory_mb: int
    pids_limit: int = 512
    bind_address: str = "127.0.0.1"  # address the Jupyter port is published on
    container_port: int = 8888
    env: dict[str, str] = field(default_factory=dict)
    hf_cache_dir: str | None = None  # host path, mounted read-only at /models/huggingface
    # Overrides the image's command (an ImageTemplate may set one); () keeps it.
    command: tuple[str, ...] = ()
    # Other HTTP ports the image declares; published on bind_address like JupyterLab's.
    http_ports: tuple[int, ...] = ()
    # sshd inside the container, reached only by the platform's SSH gateway: its port,
    # the host key (an OpenSSH private key the platform made for this run) and the
    # gateway's public key, the only one allowed in. No port = no SSH.
    ssh_port: int | None = None
    ssh_host_key: str = ""
    ssh_authorized_keys: str = ""
    # A leased whole host (the spec's optional ``dedicated``; see dedicated_fields):
    # /dev/shm size, host networking, and the RDMA device nodes the agent found.
    dedicated: bool = False
    shm_size_mb: int = 0
    host_network: bool = False
    infiniband_devices: tuple[str, ...] = ()
    memlock_bytes: int = -1  # -1: unlimited (see grantable_memlock)
    # A customer's own image, pulled from its registry under this policy; None: an image
    # of the platform's, which must be on the host already (or pulled if the agent allows).
    pull: PullPolicy | None = field(default=None, repr=False)
    # The customer's volumes: (Docker volume name, mount path, volume id) each.
    volumes: tuple[tuple[str, str, str], ...] = ()
    # A snapshot to unpack into /workspace when the host makes it: (download URL, SHA-256).
    workspace_from: tuple[str, str] | None = field(default=None, repr=False)
    # The account's private network (network.PrivateNet), joined under its names.
    private_network: PrivateNet | None = None

    def __post_init__(self) -> None:
        check_instance_id(self.instance_id)
        if self.gpu_source not in GPU_SOURCES:
            raise ValueError(f"gpu_source must be one of {GPU_SOURCES}, not {self.gpu_source!r}")
        if self.gpu_source == "nvml" and len(self.gpu_uuids) != len(self.gpu_indices):
            raise ValueError("an nvml spec needs one GPU uuid per GPU index")
        if not self.token:
            raise ValueError("token must not be empty: JupyterLab would be open to anyone")
        if self.cpu_count <= 0 or self.memory_mb <= 0 or self.pids_limit <= 0:
            raise ValueError("cpu_count, memory_mb and pids_limit must be positive")
        for port in self.published_ports:
            if not (isinstance(port, int) and 1 <= port <= 65535):
                raise ValueError(f"container ports must be 1–65535, not {port!r}")
        if self.ssh_port and not (self.ssh_host_key and self.ssh_authorized_keys):
            raise ValueError("an SSH port needs a host key and the gateway's public key")

    @property
    def published_ports(self) -> tuple[int, ...]:
        """Every container port published on bind_address, JupyterLab's first."""
        extra = [*self.http_ports, *([self.ssh_port] if self.ssh_port else [])]
        return (self.container_port, *dict.fromkeys(p for p in extra if p != self.container_port))

    def fingerprint(self) -> str:
        """A short hash of the whole spec, to tell whether a running instance matches it."""
        # How the image was pulled is not what runs (a login saved again changes nothing).
        # Nor where a new /workspace came from (its URL changes at each start).
        data = json.dumps(
            {**asdict(self), "pull": None, "workspace_from": None}, sort_keys=True, default=str
        )
        return hashlib.sha256(data.encode()).hexdigest()[:16]


INFINIBAND_DIR = "/dev/infiniband"
_CAP_SYS_RESOURCE = 24


def grantable_memlock(status_path: str = "/proc/self/status") -> int:
    """The memlock limit this host can give a container: unlimited (-1) where the host's
    root may raise limits (CAP_SYS_RESOURCE, as on any real GPU server), else the hard
    limit it has (a sandboxed engine: asking for more fails the container's start)."""
    try:
        with open(status_path) as status:
            caps = next(line for line in status if line.startswith("CapEff:"))
        if int(caps.split()[1], 16) >> _CAP_SYS_RESOURCE & 1:
            return -1
    except (OSError, StopIteration, ValueError):
        pass
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


def dedicated_fields(options: dict, infiniband_dir: str = INFINIBAND_DIR) -> dict:
    """ContainerSpec fields for a spec's ``dedicated`` options. The RDMA device nodes
    come from this host's own /dev, never from the message."""
    devices = ()
    if os.path.isdir(infiniband_dir):
        devices = tuple(
            sorted(os.path.join(infiniband_dir, name) for name in os.listdir(infiniband_dir))
        )
    return {
        "dedicated": True,
        "shm_size_mb": int(options.get("shm_size_mb") or 0),
        "host_network": bool(options.get("host_network")),
        "infiniband_devices": devices,
        "memlock_bytes": grantable_memlock(),
    }


@dataclass(frozen=True)
class Started:
    container_id: str  # Docker container id, or "pid:<n>" for the process runtime
    host: str  # the address JupyterLab is published on
    port: int
    # How long JupyterLab took to answer after the start: a measure, not part of the identity.
    ready_s: float | None = field(default=None, compare=False)
    # Every published port: container port → host port (JupyterLab's included).
    ports: dict[int, int] = field(default_factory=dict, compare=False)


class Runtime(Protocol):
    name: str

    def ensure_image(self, image: str, progress: Progress) -> None: ...

    def start(self, spec: ContainerSpec, progress: Progress) -> Started: ...

    def stop(self, instance_id: str, keep_container: bool = False, park: bool = False) -> None: ...

    def remove(self, instance_id: str) -> None: ...

    def list_instances(self) -> dict[str, str]: ...

    def logs_tail(self, instance_id: str, lines: int = 30) -> str: ...


def check_instance_id(instance_id: str) -> str:
    """Accept only canonical UUIDs: ids end up in container names and file paths."""
    try:
        canonical = str(uuid.UUID(instance_id))
    except (ValueError, TypeError, AttributeError):
        canonical = None
    if canonical != instance_id:
        raise ValueError(f"instance_id must be a lowercase UUID string, not {instance_id!r}")
    return instance_id


def ignore_progress(_message: str, pull: dict | None = None) -> None:
    """A ``progress`` callback for callers that do not report progress."""


def probe_host(bind_address: str) -> str:
    return "127.0.0.1" if bind_address in _WILDCARD_ADDRESSES else bind_address


def http_status(
    host: str, port: int, path: str, token: str | None, timeout_s: float = 2.0
) -> int | None:
    """GET a URL and return the HTTP status, or None when nothing answers.

    http.client rather than urllib or requests: those honour HTTP(S)_PROXY, and a
    proxy configured on a GPU host must not see (or break) probes of local ports.
    The token travels in the Authorization header, so it stays out of access logs.
    """
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


# Readiness probes: a refused connection to a local port costs well under a millisecond, so
# the first probes come fast (the answer is noticed within ~20 ms) and slow to READY_POLL_MAX.
READY_POLL_FIRST = 0.02
READY_POLL_GROWTH = 1.25
READY_POLL_MAX = 0.05
ALIVE_CHECK_EVERY = 0.5  # seconds between asking the runtime whether the container still runs


def wait_for_jupyter(
    host: str,
    port: int,
    token: str,
    timeout_s: float,
    check_alive: Callable[[], None] | None = None,
) -> float:
    """Poll ``/api/status`` until JupyterLab answers 200 with the token.

    Then make sure it answers 401/403 without the token, so an instance is never
    handed out open to anyone. ``check_alive`` raises RuntimeFailure when the
    container or process has died, so a crash is reported at once instead of after
    the whole timeout. Returns the seconds waited.
    """
    host = probe_host(host)
    started = time.monotonic()
    deadline = started + timeout_s
    last: int | None = None
    delay = READY_POLL_FIRST
    checked_alive = -float("inf")
    while True:
        if check_alive is not None and time.monotonic() - checked_alive >= ALIVE_CHECK_EVERY:
            check_alive()  # asks the engine: not at every probe
            checked_alive = time.monotonic()
        last = http_status(host, port, "/api/status", token)
        if last == 200:
            break
        if time.monotonic() > deadline:
            seen = "nothing answered" if last is None else f"last answer: HTTP {last}"
            raise RuntimeFailure(
                f"JupyterLab did not become ready on {host}:{port} within {timeout_s:.0f} s "
                f"({seen}); see the instance logs"
            )
        time.sleep(delay)
        delay = min(delay * READY_POLL_GROWTH, READY_POLL_MAX)
    anonymous = http_status(host, port, "/api/status", None)
    if anonymous not in (401, 403):
        raise RuntimeFailure(
            f"JupyterLab on {host}:{port} answered HTTP {anonymous} without the token; "
            "refusing to hand out an unprotected instance (check the image's token settings)"
        )
    # No progress line here: the seconds ride on the `running` report (Started.ready_s),
    # one message fewer between JupyterLab answering and the customer hearing of it.
    return time.monotonic() - started
