"""The agent's work on its host: start, stop, restart and remove instances; heartbeats.

Called by the Celery tasks in ``worker.py`` with plain dictionaries from the control
plane; reports outcomes back through the ``ControlReporter``. Every operation is
idempotent: a repeated message finds the work done and reports it again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace

from gpurental import __version__, protocol
from gpurental.agent.activity import Holding, Holdings
from gpurental.agent.gpus import GpuSource
from gpurental.agent.reporter import ControlReporter
from gpurental.agent.runtimes import ContainerRuntimeError, ContainerSpec, Runtime
from gpurental.agent.runtimes.base import PrivateNet, PullPolicy, dedicated_fields
from gpurental.agent.topology import host_topology

log = logging.getLogger(__name__)

# Runtime progress lines → the steps the console shows.
_STEPS = (
    ("pulling", "pulling_image"),
    ("creating", "creating"),
    ("replacing", "creating"),
    ("starting", "starting"),
    ("waiting for jupyterlab", "waiting_for_jupyter"),
)


def step_of(message: str) -> str:
    lowered = message.lower()
    for prefix, step in _STEPS:
        if lowered.startswith(prefix):
            return step
    return "info"


class HostAgent:
    def __init__(
        self,
        *,
        runtime: Runtime,
        source: GpuSource,
        reporter: ControlReporter,
        bind_address: str,
        holdings: Holdings | None = None,
        hf_cache_dir: str = "",
        model_import_dir: str = "",
        disk_interval: float = 60.0,
    ):
        self.runtime = runtime
        self.source = source
        self.reporter = reporter
        self.bind_address = bind_address
        # Host paths come from the agent's own configuration, never from a message.
        self.hf_cache_dir = hf_cache_dir
        self.model_import_dir = model_import_dir  # where model cache fills read from
        # Which GPUs each running instance holds, for the sampler (telemetry only).
        self.holdings = holdings if holdings is not None else Holdings()
        self._state_lock = threading.Lock()
        self._inventory: list[dict] | None = None
        self._topology: dict | None = None
        self._containers: tuple[dict[str, str], float] | None = None
        self._containers_sent_at: float | None = None
        # Workspace sizes, measured every ``disk_interval`` s (the plan's disk_gb).
        self.disk_interval = disk_interval
        self._workspaces: dict[str, int] | None = None
        self._workspaces_at = float("-inf")
        self._workspaces_sent = True
        self._volumes: dict[str, int] | None = None  # the customers' volumes, measured alike
        self._volumes_sent = True
        self._images_sent_version = -1  # the customers' images cached: sent when changed

    # --- instance operations ------------------------------------------------

    def _progress(self, instance_id: str):
        def progress(message: str, pull: dict | None = None) -> None:
            extra = {"pull": pull} if pull is not None else {}
            self.reporter.report(
                instance_id, "progress", step=step_of(message), message=message, **extra
            )

        return progress

    def _spec(self, spec: dict) -> ContainerSpec:
        data = dict(spec)
        for key in ("gpu_indices", "gpu_uuids", "command"):
            data[key] = tuple(data.get(key) or ())
        data["bind_address"] = self.bind_address
        data["http_ports"] = tuple(data.get("http_ports") or ())
        ssh = data.pop("ssh", None) or {}
        if ssh:
            data["ssh_port"] = ssh["port"]
            data["ssh_host_key"] = ssh["host_key"]
            data["ssh_authorized_keys"] = ssh["authorized_keys"]
        data["volumes"] = tuple(
            (str(v["name"]), str(v["path"]), str(v.get("volume", "")))
            for v in data.pop("volumes", None) or []
            if str(v.get("name", "")).startswith("gpurental-vol-")
            and str(v.get("path", "")).startswith("/")
        )
        source = data.pop("workspace_from", None)
        if source and str(source.get("url", "")).startswith(("https://", "http://")):
            data["workspace_from"] = (str(source["url"]), str(source.get("sha256", "")))
        pull = data.pop("pull", None)
        if pull:
            data["pull"] = PullPolicy(
                max_bytes=int(pull["max_bytes"]),
                timeout_s=float(pull["timeout_s"]),
                auth=pull.get("auth") or None,
            )
        private = data.pop("private_network", None)
        if private and not data.get("host_network"):
            data["private_network"] = PrivateNet.from_spec(private)
        dedicated = data.pop("dedicated", None)
        if dedicated:
            data.update(dedicated_fields(dedicated))
        if data.pop("mount_model_cache", False):
            if not self.hf_cache_dir:
                raise ValueError(
                    "this host's agent has no Hugging Face model cache configured "
                    "(GPURENTAL_HF_CACHE_DIR); launch without model_repo"
                )
            data["hf_cache_dir"] = self.hf_cache_dir
        return ContainerSpec(**data)

    @staticmethod
    def _fit_cpus(spec: ContainerSpec, progress) -> ContainerSpec:
        # A plan may promise more vCPUs than a small (test or demo) host has; the
        # engine refuses such a limit outright, so cap it and say so.
        available = os.cpu_count() or 1
        if spec.cpu_count <= available:
            return spec
        progress(
            f"info: the plan asks for {spec.cpu_count:g} vCPUs; this host has {available}, so {available} it is"
        )
        return replace(spec, cpu_count=float(available))

    def start(self, spec: dict) -> None:
        instance_id = spec["instance_id"]
        progress = self._progress(instance_id)
        try:
            opened = protocol.spec_open(self.reporter.keys.spec, protocol.spec_check(spec))
            container_spec = self._fit_cpus(self._spec(opened), progress)
            self._free_gpus_for(container_spec, progress)
            started = self.runtime.start(container_spec, progress)
        except (ContainerRuntimeError, ValueError) as exc:  # SpecRefused is a ValueError
            self.reporter.report(instance_id, "failed", reason=str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - report, never leave the launch hanging
            log.exception("start of %s failed", instance_id)
            self._quietly(self.runtime.stop, instance_id)
            self.reporter.report(
                instance_id,
                "failed",
                reason=f"the host agent failed: {exc.__class__.__name__}: {exc}",
            )
            return
        self.holdings.track(
            Holding(
                instance_id=instance_id,
                gpu_indices=container_spec.gpu_indices,
                container_id=started.container_id,
                cpu_count=container_spec.cpu_count,
                address=started.host,
                port=started.port,
                token=container_spec.token,
            )
        )
        self.reporter.report(
            instance_id,
            "running",
            port=started.port,
            host=started.host,
            container_id=started.container_id,
            **({"ready_s": round(started.ready_s, 3)} if started.ready_s is not None else {}),
            **({"ports": {str(k): v for k, v in started.ports.items()}} if started.ports else {}),
        )

    def _free_gpus_for(self, spec: ContainerSpec, progress) -> None:
        """The control plane hands a GPU on only when the previous instance's time on it is
        over (a stop, a reservation's end), but that stop may still wait behind this start
        in the queue. Stop such a container first: two instances never share a GPU here."""
        wanted = set(spec.gpu_indices)
        for holding in self.holdings.snapshot():
            shared = sorted(wanted & set(holding.gpu_indices))
            if holding.instance_id == spec.instance_id or not shared:
                continue
            gpus = ", ".join(str(i) for i in shared)
            progress(f"waiting for the previous container on GPU {gpus} to stop")
            log.info(
                "stopping %s before %s: GPUs %s", holding.instance_id, spec.instance_id, shared
            )
            self.stop(holding.instance_id)

    def restart(self, spec: dict) -> None:
        self._quietly(self.runtime.stop, spec["instance_id"])
        self.start(spec)

    def stop(self, instance_id: str, keep_container: bool = False, park: bool = False) -> None:
        self.holdings.untrack(instance_id)
        try:
            self.runtime.stop(instance_id, keep_container=keep_container, park=park)
        except ContainerRuntimeError as exc:
            self.reporter.report(instance_id, "error", action="stop", reason=str(exc))
            raise
        self.reporter.report(instance_id, "stopped")

    def remove(self, instance_id: str) -> None:
        self.holdings.untrack(instance_id)
        try:
            self.runtime.remove(instance_id)
        except ContainerRuntimeError as exc:
            self.reporter.report(instance_id, "error", action="remove", reason=str(exc))
            raise
        self.reporter.report(instance_id, "removed")

    @staticmethod
    def _quietly(fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - best-effort cleanup; the next heartbeat tells the truth
            log.exception("cleanup %s%s failed", getattr(fn, "__name__", fn), args)

    # --- heartbeat and host state ---------------------------------------------

    def refresh_state(self) -> None:
        """Ask the engine and the GPUs what this host runs; may be slow (a busy Docker
        Engine, a hung driver), so it runs on its own thread and never holds up a beat."""
        listed_at = time.time()
        monotonic_at = time.monotonic()
        containers = self.runtime.list_instances()
        self.holdings.keep_only(
            {i for i, state in containers.items() if state == "running"}, listed_at=monotonic_at
        )
        inventory = self._inventory
        if inventory is None:  # read once: handles stay open, the GPUs do not change
            inventory = [gpu.as_dict() for gpu in self.source.inventory()]
        topology = self._topology
        if topology is None:  # read once too, like the inventory
            topology = self._read_topology()
        workspaces = volumes = None
        if monotonic_at - self._workspaces_at >= self.disk_interval:
            workspaces = self.runtime.workspace_usage()
            measure = getattr(self.runtime, "volume_usage", None)
            volumes = measure() if measure is not None else None
            self._workspaces_at = monotonic_at
        with self._state_lock:
            self._inventory = inventory
            self._topology = topology
            self._containers = (containers, listed_at)
            if workspaces is not None:
                self._workspaces, self._workspaces_sent = workspaces, False
            if volumes is not None:
                self._volumes, self._volumes_sent = volumes, False

    def _read_topology(self) -> dict:
        try:
            return host_topology(self.source)
        except Exception as exc:  # noqa: BLE001 - the inventory must still go out
            log.warning("could not read the GPU topology: %s", exc)
            return {"error": f"{exc.__class__.__name__}: {exc}"}

    def inventory(self) -> list[dict] | None:
        with self._state_lock:
            return self._inventory

    def heartbeat(self) -> None:
        """Liveness: sends what is already known, and touches neither Docker nor NVML."""
        with self._state_lock:
            inventory, topology = self._inventory, self._topology
            containers, listed_at = self._containers or (None, None)
            fresh = listed_at is not None and listed_at != self._containers_sent_at
            self._containers_sent_at = listed_at
            workspaces = None if self._workspaces_sent else self._workspaces
            self._workspaces_sent = True
            volumes = None if self._volumes_sent else self._volumes
            self._volumes_sent = True
            images = None
            cache = getattr(self.runtime, "image_cache", None)
            if cache is not None and cache.version != self._images_sent_version:
                images, self._images_sent_version = cache.listing(), cache.version
        self.reporter.heartbeat(
            workspaces=workspaces,
            volumes=volumes,
            images=images,
            inventory=inventory,
            topology=topology,
            containers=containers if fresh else None,
            containers_listed_at=listed_at if fresh else None,
            runtime=self.runtime.name,
            gpu_source=self.source.kind,
            agent_version=__version__,
        )


class _Every(threading.Thread):
    """Calls ``fn`` every ``interval`` seconds until stopped; a failure waits for the next turn."""

    def __init__(self, name: str, fn, interval: float):
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.fn()
            except Exception:  # noqa: BLE001 - retried next turn
                log.exception("%s failed", self.name)
            self.stopped.wait(self.interval)


class HeartbeatThread(_Every):
    def __init__(self, agent: HostAgent, interval: float):
        super().__init__("heartbeat", agent.heartbeat, interval)


class HostStateThread(_Every):
    def __init__(self, agent: HostAgent, interval: float):
        super().__init__("host-state", agent.refresh_state, interval)
