"""An honest fake of the ``pynvml`` module (nvidia-ml-py) for machines without NVIDIA GPUs.

Same function names, constants, error class and return shapes as the real module;
the "hardware" is a list of FakeDevice objects a test describes. Counts calls, so
tests can check that handles are opened once.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            1: "Uninitialized",
            2: "Invalid Argument",
            3: "Not Supported",
            9: "Driver Not Loaded",
        }.get(self.value, f"NVML error {self.value}")


@dataclass
class FakeDevice:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 81559 * 1024 * 1024
    memory_used: int = 0
    utilization: int = 0
    temperature: int = 35
    power_mw: int = 70_000
    sm_clock: int = 1980
    nvlink_peers: set[int] = field(default_factory=set)
    p2p_supported: bool = True
    # Boards such as some PCIe cards answer NOT_SUPPORTED for power.
    power_supported: bool = True
    # A driver call that hangs (a GPU falling off the bus): set, utilisation
    # reads block until the test sets the event.
    hang: threading.Event | None = None


class _State:
    devices: list[FakeDevice] = []
    initialised = False
    driver_loaded = True
    calls: Counter = Counter()


state = _State()


def install(devices: list[FakeDevice], *, driver_loaded: bool = True) -> None:
    state.devices = devices
    state.initialised = False
    state.driver_loaded = driver_loaded
    state.calls = Counter()


def _check(handle=None) -> FakeDevice | None:
    if not state.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if handle is not None:
        if not isinstance(handle, int) or not 0 <= handle < len(state.devices):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return state.devices[handle]
    return None


_calls_lock = threading.Lock()  # sampling reads GPUs from several threads


def _count(name: str) -> None:
    with _calls_lock:
        state.calls[name] += 1


def nvmlInit() -> None:
    _count("nvmlInit")
    if not state.driver_loaded:
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    state.initialised = True


def nvmlShutdown() -> None:
    _count("nvmlShutdown")
    _check()
    state.initialised = False


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return "550.54.15"


def nvmlDeviceGetCount() -> int:
    _count("nvmlDeviceGetCount")
    _check()
    return len(state.devices)


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _count("nvmlDeviceGetHandleByIndex")
    _check()
    if not 0 <= index < len(state.devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return index  # the real handle is an opaque pointer; an int stands for it


def nvmlDeviceGetName(handle) -> str:
    return _check(handle).name


def nvmlDeviceGetUUID(handle) -> str:
    return _check(handle).uuid


def nvmlDeviceGetMemoryInfo(handle, version=None):
    _count("nvmlDeviceGetMemoryInfo")
    dev = _check(handle)
    return SimpleNamespace(
        total=dev.memory_total, used=dev.memory_used, free=dev.memory_total - dev.memory_used
    )


def nvmlDeviceGetUtilizationRates(handle):
    _count("nvmlDeviceGetUtilizationRates")
    dev = _check(handle)
    if dev.hang is not None:
        dev.hang.wait(30)
    return SimpleNamespace(gpu=dev.utilization, memory=min(100, dev.utilization // 2))


def nvmlDeviceGetTemperature(handle, sensor: int) -> int:
    _count("nvmlDeviceGetTemperature")
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _check(handle).temperature


def nvmlDeviceGetPowerUsage(handle) -> int:
    _count("nvmlDeviceGetPowerUsage")
    dev = _check(handle)
    if not dev.power_supported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return dev.power_mw


def nvmlDeviceGetClockInfo(handle, clock_type: int) -> int:
    _count("nvmlDeviceGetClockInfo")
    if clock_type != NVML_CLOCK_SM:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _check(handle).sm_clock


def nvmlDeviceGetP2PStatus(device1, device2, p2p_index: int) -> int:
    a, b = _check(device1), _check(device2)
    if p2p_index != NVML_P2P_CAPS_INDEX_NVLINK:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not (a.p2p_supported and b.p2p_supported):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return NVML_P2P_STATUS_OK if device2 in a.nvlink_peers else NVML_P2P_STATUS_NOT_SUPPORTED


def nvmlDeviceGetComputeRunningProcesses(handle):
    _count("nvmlDeviceGetComputeRunningProcesses")
    _check(handle)
    return []
