"""Real NVIDIA GPUs through NVML.

NVML is initialised once and device handles are kept open for the life of the
source (opening them is the slow part). NVLink peers come from the P2P status
query, which also answers correctly behind NVSwitch, where the link's remote PCI
address is the switch, not the peer GPU.

Sampling (``sample``) reads utilisation, memory, temperature, power and SM clock
once per tick, never the process list (it takes milliseconds and holds a driver
lock). Each GPU is read in its own worker thread and the tick waits at most
``deadline_s``: a GPU whose NVML call hangs (a GPU falling off the bus, a driver
busy with an Xid) is reported ``stale`` for that tick instead of stalling the
others, and is not asked again until its stuck call returns.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures

from gpurental.agent.gpus.base import GpuInfo, GpuSample
from gpurental.agent.topology import read_gpu_topology

# A tick is one second; a reading not back after this long is "stale" for the tick.
SAMPLE_DEADLINE_S = 0.5


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
        try:  # the newest CUDA the driver supports: 12040 = 12.4
            self.driver_cuda: int | None = int(self._nvml.nvmlSystemGetCudaDriverVersion())
        except (self._nvml.NVMLError, AttributeError):
            self.driver_cuda = None
        self._executor: ThreadPoolExecutor | None = None
        self._inflight: dict[int, Future] = {}

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

    def topology(self) -> dict:
        with self._lock:
            return read_gpu_topology(self._nvml, self.handles)

    # --- telemetry ------------------------------------------------------------

    def _optional(self, fn, *args):
        """One reading; None where the board does not support it (e.g. power on some PCIe cards)."""
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def _read(self, index: int) -> GpuSample:
        nvml, handle = self._nvml, self.handles[index]
        # Utilisation is NVML's own average over its sample period (1/6 s to 1 s);
        # power is a 1 s average on recent GPUs. Both fit a 1 s tick as they are.
        rates = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        temp = self._optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        clock = self._optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        return GpuSample(
            index=index,
            util=float(rates.gpu) if rates is not None else None,
            mem_used=int(memory.used) if memory is not None else None,
            mem_total=int(memory.total) if memory is not None else None,
            temp=float(temp) if temp is not None else None,
            power=round(power_mw / 1000, 1) if power_mw is not None else None,
            sm_clock=int(clock) if clock is not None else None,
        )

    def sample(
        self,
        *,
        activity: dict[int, float | None] | None = None,
        deadline_s: float = SAMPLE_DEADLINE_S,
    ) -> list[GpuSample]:
        """All GPUs now; a GPU that does not answer within ``deadline_s`` is ``stale``."""
        if self._executor is None:
            # One thread per GPU: a hung call on one GPU never delays another.
            self._executor = ThreadPoolExecutor(
                max_workers=len(self.handles), thread_name_prefix="nvml-sample"
            )
        for index in range(len(self.handles)):
            busy = self._inflight.get(index)
            if busy is None or busy.done():
                # A GPU whose previous call is still stuck is not asked again: at
                # most one thread per GPU can ever be blocked in the driver.
                self._inflight[index] = self._executor.submit(self._read, index)
        wait_futures(self._inflight.values(), timeout=deadline_s)
        samples = []
        for index in range(len(self.handles)):
            future = self._inflight[index]
            if future.done() and future.exception() is None:
                samples.append(future.result())
                del self._inflight[index]
            else:
                if future.done():  # an unexpected error: report stale, try again next tick
                    del self._inflight[index]
                samples.append(GpuSample.stale_for(index))
        return samples

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()
