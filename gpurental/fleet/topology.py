"""Reading a host's topology (``Host.topology``, as the agent sends it): pure functions for
the staff matrix and the catalog's one-line summary of a host class."""

from __future__ import annotations

from collections import Counter

from gpurental.agent.topology import LEGEND

FABRIC_LABELS = {"nvswitch": "NVSwitch", "nvlink": "NVLink", "pcie": "PCIe"}
NIC_KINDS = {"infiniband": "InfiniBand", "roce": "RoCE", "ethernet": ""}


def matrix_rows(topology: dict) -> list[tuple[str, list[str]]]:
    """``[("GPU0", ["X", "NVS", …]), …]`` for the staff page; [] when none was reported."""
    matrix = (topology or {}).get("matrix") or []
    return [(f"GPU{i}", [str(cell) for cell in row]) for i, row in enumerate(matrix)]


def legend(topology: dict) -> list[tuple[str, str]]:
    """The labels this matrix uses, with what they mean."""
    used = {cell for _, row in matrix_rows(topology) for cell in row}
    shown = []
    for label, meaning in LEGEND.items():
        if label == "NV#":
            if any(c.startswith("NV") and c[2:].isdigit() for c in used):
                shown.append(("NV#", meaning))
        elif label in used:
            shown.append((label, meaning))
    return shown


def _speed(mbps: int) -> str:
    gbps = mbps / 1000
    return f"{gbps:g} Gb/s" if gbps >= 1 else f"{mbps} Mb/s"


def nic_summary(topology: dict) -> str:
    """'4× 400 Gb/s InfiniBand, 2× 25 Gb/s': NICs with a known speed, fastest first."""
    groups = Counter(
        (nic["speed_mbps"], nic.get("kind", "ethernet"))
        for nic in (topology or {}).get("nics") or []
        if isinstance(nic.get("speed_mbps"), int) and nic["speed_mbps"] > 0
    )
    parts = []
    for (mbps, kind), count in sorted(groups.items(), key=lambda item: -item[0][0]):
        label = f"{count}× {_speed(mbps)}"
        if NIC_KINDS.get(kind):
            label += f" {NIC_KINDS[kind]}"
        parts.append(label)
    return ", ".join(parts)


def host_class(*, gpu_count: int, short_name: str, topology: dict) -> str:
    """'8× H100, NVSwitch, 4× 400 Gb/s': what a customer needs to know of a host's build."""
    parts = [f"{gpu_count}× {short_name}"]
    fabric = FABRIC_LABELS.get((topology or {}).get("fabric", ""))
    if fabric:
        parts.append(fabric)
    nics = nic_summary(topology)
    if nics:
        parts.append(nics)
    return ", ".join(parts)
