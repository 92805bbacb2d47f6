"""How a host's GPUs and NICs are connected: read once at start, sent with the inventory.

GPU pairs, as ``nvidia-smi topo -m`` prints them:

- ``NV<n>``: ``n`` NVLinks straight between the two GPUs (bridged pairs, DGX-1 style meshes);
- ``NVS``: both GPUs have NVLinks into NVSwitch, so every pair talks at full NVLink speed
  (HGX boards). Behind NVSwitch a link's remote end is the switch, not the peer GPU;
- otherwise the PCIe path, from NVML's common ancestor: ``PIX`` (one PCIe switch), ``PXB``
  (several switches, no host bridge), ``PHB`` (through the host bridge), ``NODE`` (across
  host bridges of one NUMA node), ``SYS`` (across CPU sockets).

NICs come from ``/sys/class/net`` (physical ones only: those with a ``device``), with their
speed, and whether they are InfiniBand or RoCE (an RDMA device in ``/sys/class/infiniband``
sits on them).

Django-free, like the rest of the agent. The result is a plain dict (``protocol``'s
``topology`` shape)::

    {"source": "nvml" | "simulated",
     "fabric": "nvswitch" | "nvlink" | "pcie",
     "gpus": [{"index": 0, "pci_bus_id": "00000000:18:00.0", "nvlinks": 18}, ...],
     "matrix": [["X", "NVS", ...], ...],      # matrix[i][j]: GPU i to GPU j
     "nics": [{"name": "ib0", "speed_mbps": 400000, "kind": "infiniband", "rdma": "mlx5_0"}]}
"""

from __future__ import annotations

import contextlib
import os
import re

# nvmlGpuTopologyLevel_t → nvidia-smi's label.
_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# What each label means, for the staff page's legend.
LEGEND = {
    "X": "self",
    "NV#": "that many NVLinks straight between the pair",
    "NVS": "NVLink through NVSwitch",
    "PIX": "at most one PCIe switch apart",
    "PXB": "several PCIe switches apart, no host bridge",
    "PHB": "through a PCIe host bridge",
    "NODE": "across host bridges of one NUMA node",
    "SYS": "across CPU sockets (the SMP interconnect)",
}
_ARPHRD_INFINIBAND = "32"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pci_key(bus_id) -> tuple[int, int, str]:
    """A PCI address in a comparable form: NVML writes the domain with 8 digits in one
    place and 4 in another (``00000000:18:00.0`` vs ``0000:18:00.0``)."""
    domain, bus, rest = _text(bus_id).strip("\x00").upper().split(":")
    return int(domain, 16), int(bus, 16), rest


def fabric_of(matrix: list[list[str]]) -> str:
    cells = {cell for row in matrix for cell in row}
    if "NVS" in cells:
        return "nvswitch"
    if any(cell.startswith("NV") for cell in cells):
        return "nvlink"
    return "pcie"


def read_gpu_topology(nvml, handles: list) -> dict:
    """Per pair of GPUs, how they are connected (see the module's docstring)."""
    keys = [pci_key(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
    index_of = {key: i for i, key in enumerate(keys)}
    count = len(handles)
    direct = [[0] * count for _ in range(count)]
    to_switch = [0] * count
    active = [0] * count
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    for i, handle in enumerate(handles):
        for link in range(max_links):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_NOT_SUPPORTED and link == 0:
                    break  # a board without NVLink
                continue  # a link number this GPU does not have, or one it cannot tell
            active[i] += 1
            try:
                remote_type = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except (nvml.NVMLError, AttributeError):
                remote_type = None  # older drivers: judge by the remote address below
            remote = pci_key(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            if remote_type == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH or (
                remote_type is None and remote not in index_of
            ):
                to_switch[i] += 1
            elif remote in index_of and index_of[remote] != i:
                direct[i][index_of[remote]] += 1
    matrix = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
            elif direct[i][j] or direct[j][i]:
                row.append(f"NV{max(direct[i][j], direct[j][i])}")
            elif to_switch[i] and to_switch[j]:
                row.append("NVS")
            else:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                row.append(_LEVELS.get(int(level), "SYS"))
        matrix.append(row)
    return {
        "source": "nvml",
        "fabric": fabric_of(matrix),
        "gpus": [
            {"index": i, "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(h).busId), "nvlinks": n}
            for i, (h, n) in enumerate(zip(handles, active, strict=True))
        ],
        "matrix": matrix,
    }


def simulated_gpu_topology(count: int, *, nvlink: bool) -> dict:
    """What a simulated host says: an HGX-like NVSwitch board for SXM models, else PCIe
    cards two to a switch with the second half on the second socket."""
    matrix = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
            elif nvlink:
                row.append("NVS")
            elif i // 2 == j // 2:
                row.append("PIX")
            elif (i < count // 2) == (j < count // 2):
                row.append("PHB")
            else:
                row.append("SYS")
        matrix.append(row)
    return {
        "source": "simulated",
        "fabric": fabric_of(matrix),
        "gpus": [
            {"index": i, "pci_bus_id": "", "nvlinks": 18 if nvlink else 0} for i in range(count)
        ],
        "matrix": matrix,
    }


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:  # a link that is down answers EINVAL for its speed
        return None


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def read_nics(sys_root: str = "/sys") -> list[dict]:
    """The host's physical NICs with speed and kind; virtual ones (bridges, veths, the
    Docker networks) have no ``device`` and are left out."""
    net = os.path.join(sys_root, "class", "net")
    nics = []
    with contextlib.suppress(OSError):
        names = sorted(os.listdir(net))
        for name in names:
            base = os.path.join(net, name)
            if not os.path.exists(os.path.join(base, "device")):
                continue
            speed = _read(os.path.join(base, "speed"))
            speed_mbps = int(speed) if speed and speed.lstrip("-").isdigit() else None
            if speed_mbps is not None and speed_mbps <= 0:
                speed_mbps = None  # -1: link down or speed unknown
            rdma = None
            with contextlib.suppress(OSError):
                found = sorted(os.listdir(os.path.join(base, "device", "infiniband")))
                rdma = found[0] if found else None
            infiniband = _read(os.path.join(base, "type")) == _ARPHRD_INFINIBAND
            if rdma:
                # The RDMA port's rate is the truth for IPoIB, whose netdev speed may not be.
                rate = _read(
                    os.path.join(sys_root, "class", "infiniband", rdma, "ports", "1", "rate")
                )
                match = _RATE.match(rate or "")
                if match:
                    speed_mbps = int(float(match.group(1)) * 1000)
            kind = "infiniband" if infiniband else "roce" if rdma else "ethernet"
            nics.append({"name": name, "speed_mbps": speed_mbps, "kind": kind, "rdma": rdma})
    return nics


def host_topology(source, *, sys_root: str = "/sys") -> dict:
    """GPU pairs from the GPU source, the NICs from sysfs and the driver (its version, and
    the newest CUDA it supports: fleet.drivers), in one dict for the heartbeat."""
    driver = {
        "version": str(getattr(source, "driver_version", "")),
        "cuda": getattr(source, "driver_cuda", None),
    }
    return {**source.topology(), "nics": read_nics(sys_root), "driver": driver}
