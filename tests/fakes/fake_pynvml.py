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
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
# nvmlGpuTopologyLevel_t: how far apart two GPUs are on the PCIe tree.
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10  # one PCIe switch (nvidia-smi: PIX)
NVML_TOPOLOGY_MULTIPLE = 20  # several PCIe switches, no host bridge (PXB)
NVML_TOPOLOGY_HOSTBRIDGE = 30  # the same host bridge (PHB)
NVML_TOPOLOGY_NODE = 40  # host bridges of one NUMA node (NODE)
NVML_TOPOLOGY_SYSTEM = 50  # across CPU sockets (SYS)


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
    # Where the board sits: its PCI address, and the PCIe tree above it (two GPUs on the
    # same leaf switch are PIX apart, same upstream switch PXB, same host bridge PHB, same
    # socket NODE, else SYS).
    pci_bus_id: str = "00000000:18:00.0"
    pcie_switch: int = 0
    pcie_root: int = 0
    host_bridge: int = 0
    socket: int = 0
    # Its NVLinks, one entry per link: (remote device type, remote PCI bus id, active).
    # None: a board without NVLink (every link query answers NOT_SUPPORTED).
    nvlinks: list[tuple[int, str, bool]] | None = None


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


def nvmlSystemGetCudaDriverVersion() -> int:
    _check()
    return 12040  # what driver 550.54 supports: CUDA 12.4


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


def nvmlDeviceGetPciInfo(handle):
    dev = _check(handle)
    domain, bus, rest = dev.pci_bus_id.split(":")
    device = rest.split(".")[0]
    return SimpleNamespace(
        busId=dev.pci_bus_id.encode(),
        busIdLegacy=dev.pci_bus_id[4:].encode(),
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(device, 16),
        pciDeviceId=0x233010DE,
        pciSubSystemId=0x16C110DE,
    )


def _link(handle, link: int) -> tuple[int, str, bool]:
    dev = _check(handle)
    if dev.nvlinks is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= link < len(dev.nvlinks):
        # Real NVML: a link number past this GPU's links is an invalid argument.
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return dev.nvlinks[link]


def nvmlDeviceGetNvLinkState(device, link: int) -> int:
    _count("nvmlDeviceGetNvLinkState")
    return NVML_FEATURE_ENABLED if _link(device, link)[2] else NVML_FEATURE_DISABLED


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link: int) -> int:
    return _link(handle, link)[0]


def nvmlDeviceGetNvLinkRemotePciInfo(device, link: int):
    remote = _link(device, link)[1]
    domain, bus, rest = remote.split(":")
    return SimpleNamespace(
        busId=remote.encode(),
        busIdLegacy=remote[4:].encode(),
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(rest.split(".")[0], 16),
    )


def nvmlDeviceGetTopologyCommonAncestor(device1, device2) -> int:
    _count("nvmlDeviceGetTopologyCommonAncestor")
    a, b = _check(device1), _check(device2)
    if device1 == device2:
        return NVML_TOPOLOGY_INTERNAL
    if a.socket != b.socket:
        return NVML_TOPOLOGY_SYSTEM
    if a.host_bridge != b.host_bridge:
        return NVML_TOPOLOGY_NODE
    if a.pcie_root != b.pcie_root:
        return NVML_TOPOLOGY_HOSTBRIDGE
    if a.pcie_switch != b.pcie_switch:
        return NVML_TOPOLOGY_MULTIPLE
    return NVML_TOPOLOGY_SINGLE


def nvmlDeviceGetComputeRunningProcesses(handle):
    _count("nvmlDeviceGetComputeRunningProcesses")
    _check(handle)
    return []


# --- layouts: whole boards as a test describes them ------------------------------------

# Bus ids of an HGX H100 board's GPUs, as `nvidia-smi` lists them on a DGX H100.
_HGX_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def nvswitch_layout(
    count: int = 8, *, name: str = "NVIDIA H100 80GB HBM3", links: int = 18
) -> list[FakeDevice]:
    """An HGX board: each GPU's ``links`` NVLinks go to the board's NVSwitches (none
    straight to another GPU), so every pair talks over NVSwitch. Two GPUs share each
    PCIe switch; half the GPUs hang off each CPU socket."""
    switches = [f"00000000:{0x05 + s:02X}:00.0" for s in range(4)]
    devices = []
    for i in range(count):
        devices.append(
            FakeDevice(
                name=name,
                uuid=f"GPU-hgx-{i}",
                pci_bus_id=f"00000000:{_HGX_BUS[i % 8]}:00.0",
                pcie_switch=i // 2,
                pcie_root=i // 2,
                host_bridge=i // 2,
                socket=0 if i < count // 2 else 1,
                nvlink_peers={j for j in range(count) if j != i},
                nvlinks=[
                    (NVML_NVLINK_DEVICE_TYPE_SWITCH, switches[k % 4], True) for k in range(links)
                ],
            )
        )
    return devices


def nvlink_pairs_layout(links_per_pair: int = 4) -> list[FakeDevice]:
    """Four PCIe cards with NVLink bridges in pairs (0–1, 2–3): NV<n> within a pair,
    PCIe between them."""
    bus = [f"00000000:{b}:00.0" for b in ("3B", "5E", "86", "AF")]
    devices = []
    for i in range(4):
        peer = i ^ 1
        devices.append(
            FakeDevice(
                name="NVIDIA A100-SXM4-80GB",
                uuid=f"GPU-pair-{i}",
                pci_bus_id=bus[i],
                pcie_switch=i // 2,
                pcie_root=0,
                host_bridge=0,
                socket=0,
                nvlink_peers={peer},
                nvlinks=[(NVML_NVLINK_DEVICE_TYPE_GPU, bus[peer], True)] * links_per_pair
                + [(NVML_NVLINK_DEVICE_TYPE_GPU, bus[peer], False)] * 2,
            )
        )
    return devices


def pcie_layout(count: int = 8, *, name: str = "NVIDIA L4") -> list[FakeDevice]:
    """PCIe cards only, no NVLink: pairs share a PCIe switch (PIX), two switches under one
    upstream switch (PXB), the other half of the cards on the second socket (SYS)."""
    devices = []
    for i in range(count):
        devices.append(
            FakeDevice(
                name=name,
                uuid=f"GPU-pcie-{i}",
                pci_bus_id=f"00000000:{0x17 + 0x10 * i:02X}:00.0",
                memory_total=23034 * 1024 * 1024,
                pcie_switch=i // 2,
                pcie_root=i // 4,
                host_bridge=i // 4,
                socket=i // 4,
                p2p_supported=False,
                nvlinks=None,
            )
        )
    return devices
