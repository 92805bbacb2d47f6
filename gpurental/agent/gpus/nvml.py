"""Real NVIDIA GPUs through NVML.

NVML is initialised once and device handles are kept open for the life of the
source (opening them is the slow part). NVLink peers come from the P2P status
query, which also answers correctly behind NVSwitch, where the link's remote PCI
address is the switch, not the peer GPU.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import threading

from gpurental.agent.gpus.base import GpuInfo


class NvmlUnavailable(RuntimeError):
    """No usable NVML on this machine (no driver, no library, no GPU)."""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSource:
    kind = "nvml"

    def __init__(self, module=None):
        self._nvml = module or importlib.import_module("pynvml")
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML could not start: {exc}") from exc
        self._lock = threading.Lock()
        count = self._nvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML found no GPU on this host")
        self.handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.driver_version = _text(self._nvml.nvmlSystemGetDriverVersion())

    def _nvlink_peers(self) -> dict[int, set[int]]:
        nvml = self._nvml
        peers: dict[int, set[int]] = {i: set() for i in range(len(self.handles))}
        for a, b in itertools.combinations(range(len(self.handles)), 2):
            try:
                status = nvml.nvmlDeviceGetP2PStatus(
                    self.handles[a], self.handles[b], nvml.NVML_P2P_CAPS_INDEX_NVLINK
                )
            except nvml.NVMLError:
                continue  # e.g. NOT_SUPPORTED on consumer boards: treat as no NVLink
            if status == nvml.NVML_P2P_STATUS_OK:
                peers[a].add(b)
                peers[b].add(a)
        return peers

    def inventory(self) -> list[GpuInfo]:
        nvml = self._nvml
        with self._lock:
            peers = self._nvlink_peers()
            gpus = []
            for index, handle in enumerate(self.handles):
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                gpus.append(
                    GpuInfo(
                        index=index,
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                        name=_text(nvml.nvmlDeviceGetName(handle)),
                        memory_mb=int(memory.total) // (1024 * 1024),
                        nvlink_peers=tuple(sorted(peers[index])),
                    )
                )
            return gpus

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()
