"""What the sampler knows about the instances running on this host.

``Holdings``: which GPUs each running instance holds, taken from the start specs the
control plane sent (the agent has no database). It is kept in a small JSON file in
the agent's work directory (mode 600: it holds JupyterLab tokens, which the kernel
probe needs), so an agent restart does not forget who holds what; the heartbeat
drops instances the runtime no longer runs.

``CpuMeter``: how busy an instance is, as CPU cores used since the last reading. Read
cheaply from the kernel, never through the Docker API (which takes a second per
``stats`` call): a Docker container's cgroup ``cpu.stat``, or for the process runtime
the ``/proc/<pid>/stat`` times of JupyterLab and its kernels. The simulated GPU
source turns that into load; None when it cannot be read.

``KernelProbe``: JupyterLab's ``/api/kernels`` (``execution_state`` and
``last_activity``), polled every 30 s in its own thread, so the idle policy does
not stop an instance whose kernel is busy on the CPU or waiting on I/O.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpurental.agent.runtimes.base import probe_host

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holding:
    instance_id: str
    gpu_indices: tuple[int, ...]
    container_id: str = ""  # Docker container id, or "pid:<n>" for the process runtime
    cpu_count: float = 1.0
    address: str = ""  # where JupyterLab is published
    port: int = 0
    token: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> Holding:
        return cls(**{**data, "gpu_indices": tuple(data.get("gpu_indices") or ())})


class Holdings:
    """Instance → GPU indices on this host; thread-safe, persisted when given a path."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._items: dict[str, Holding] = {}
        self._tracked_at: dict[str, float] = {}  # monotonic; loaded holdings count as old
        if self.path is not None and self.path.exists():
            try:
                raw = json.loads(self.path.read_text())
                self._items = {h["instance_id"]: Holding.from_dict(h) for h in raw}
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable %s", self.path)

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump([asdict(h) for h in self._items.values()], handle)
        os.replace(tmp, self.path)

    def track(self, holding: Holding) -> None:
        with self._lock:
            # The newest start wins a GPU: a missed stop must never make two
            # instances claim one GPU (and see each other's numbers).
            taken = set(holding.gpu_indices)
            for other in list(self._items.values()):
                if other.instance_id != holding.instance_id and taken & set(other.gpu_indices):
                    rest = tuple(i for i in other.gpu_indices if i not in taken)
                    self._items[other.instance_id] = Holding(
                        **{**asdict(other), "gpu_indices": rest}
                    )
            self._items[holding.instance_id] = holding
            self._tracked_at[holding.instance_id] = time.monotonic()
            self._save()

    def untrack(self, instance_id: str) -> None:
        with self._lock:
            self._tracked_at.pop(instance_id, None)
            if self._items.pop(instance_id, None) is not None:
                self._save()

    def keep_only(self, running: set[str], *, listed_at: float) -> None:
        """Forget instances the runtime no longer runs (called with each heartbeat).

        ``listed_at`` is when ``running`` was listed (monotonic): a start that
        finished after that is not in the list yet and must be kept.
        """
        with self._lock:
            gone = [
                i
                for i in self._items
                if i not in running and self._tracked_at.get(i, 0.0) < listed_at
            ]
            for instance_id in gone:
                del self._items[instance_id]
                self._tracked_at.pop(instance_id, None)
            if gone:
                self._save()

    def snapshot(self) -> list[Holding]:
        with self._lock:
            return list(self._items.values())

    def by_gpu(self) -> dict[int, Holding]:
        return {index: h for h in self.snapshot() for index in h.gpu_indices}


# --- CPU activity ---------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


class CpuMeter:
    def __init__(self, *, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup"):
        self.proc = Path(proc)
        self.cgroup = Path(cgroup)
        self._last: dict[str, tuple[float, float]] = {}

    # Where Docker puts a container's cgroup: systemd driver (v2, v1), cgroupfs driver.
    def _cgroup_seconds(self, container_id: str) -> float | None:
        v2 = (
            self.cgroup / "system.slice" / f"docker-{container_id}.scope" / "cpu.stat",
            self.cgroup / "docker" / container_id / "cpu.stat",
        )
        for path in v2:
            text = _read(path)
            if text is not None:
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
        v1 = (
            self.cgroup / "cpuacct" / "system.slice" / f"docker-{container_id}.scope",
            self.cgroup / "cpuacct" / "docker" / container_id,
            self.cgroup / "cpu,cpuacct" / "docker" / container_id,
        )
        for directory in v1:
            text = _read(directory / "cpuacct.usage")
            if text is not None and text.strip().isdigit():
                return int(text) / 1e9
        return None

    def _process_seconds(self, pid: int) -> float | None:
        total, seen, todo = 0.0, set(), [pid]
        while todo:
            current = todo.pop()
            if current in seen or len(seen) > 2000:
                continue
            seen.add(current)
            stat = _read(self.proc / str(current) / "stat")
            if stat is None:
                if current == pid:
                    return None  # the instance's process is gone
                continue
            # The command name may hold spaces and parentheses: split after the last ")".
            fields = stat.rsplit(")", 1)[-1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
            tasks = self.proc / str(current) / "task"
            with contextlib.suppress(OSError):
                for task in tasks.iterdir():
                    children = _read(task / "children") or ""
                    todo.extend(int(c) for c in children.split())
        return total

    def cpu_seconds(self, container_id: str) -> float | None:
        if container_id.startswith("pid:"):
            try:
                return self._process_seconds(int(container_id[4:]))
            except ValueError:
                return None
        if container_id:
            return self._cgroup_seconds(container_id)
        return None

    def cores_used(self, holdings: list[Holding], now: float) -> dict[str, float | None]:
        """Cores each instance used since the previous call (None: unknown, or first call)."""
        result: dict[str, float | None] = {}
        for holding in holdings:
            seconds = self.cpu_seconds(holding.container_id)
            previous = self._last.get(holding.instance_id)
            result[holding.instance_id] = None
            if seconds is None:
                self._last.pop(holding.instance_id, None)
                continue
            if previous is not None and now > previous[0]:
                result[holding.instance_id] = max(0.0, seconds - previous[1]) / (now - previous[0])
            self._last[holding.instance_id] = (now, seconds)
        for gone in set(self._last) - {h.instance_id for h in holdings}:
            del self._last[gone]
        return result


# --- JupyterLab kernels -------------------------------------------------------

KERNEL_ACTIVE_WITHIN_S = 90.0


def kernels_active(kernels: list[dict], *, now: datetime) -> bool:
    """Busy now, or active within the last 90 s (the probe runs every 30 s)."""
    for kernel in kernels:
        if kernel.get("execution_state") == "busy":
            return True
        try:
            last = datetime.fromisoformat(
                str(kernel.get("last_activity", "")).replace("Z", "+00:00")
            )
        except ValueError:
            continue
        if last.tzinfo is not None and (now - last).total_seconds() <= KERNEL_ACTIVE_WITHIN_S:
            return True
    return False


def fetch_kernels(address: str, port: int, token: str, timeout_s: float = 2.0) -> list[dict] | None:
    """JupyterLab's kernel list, or None when it does not answer (http.client: no proxies)."""
    conn = http.client.HTTPConnection(probe_host(address), port, timeout=timeout_s)
    try:
        conn.request("GET", "/api/kernels", headers={"Authorization": f"token {token}"})
        response = conn.getresponse()
        if response.status != 200:
            return None
        data = json.loads(response.read(1_000_000))
        return data if isinstance(data, list) else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


class KernelProbe(threading.Thread):
    """Every ``interval`` s: is any kernel of each instance active? (None: no answer)."""

    def __init__(self, holdings: Holdings, interval: float = 30.0, fetch=fetch_kernels):
        super().__init__(name="kernel-probe", daemon=True)
        self.holdings = holdings
        self.interval = interval
        self.fetch = fetch
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._active: dict[str, bool | None] = {}

    def active(self) -> dict[str, bool | None]:
        with self._lock:
            return dict(self._active)

    def probe_once(self) -> None:
        now = datetime.now(UTC)
        found: dict[str, bool | None] = {}
        for holding in self.holdings.snapshot():
            if not (holding.port and holding.token):
                continue
            kernels = self.fetch(holding.address, holding.port, holding.token)
            found[holding.instance_id] = (
                None if kernels is None else kernels_active(kernels, now=now)
            )
        with self._lock:
            self._active = found

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            try:
                self.probe_once()
            except Exception:  # noqa: BLE001 - a failed probe is retried next round
                log.exception("kernel probe failed")
            self.stopped.wait(max(1.0, self.interval - (time.monotonic() - started)))
