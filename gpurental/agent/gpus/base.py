from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as a host reports it in its heartbeat."""

    index: int
    uuid: str
    name: str
    memory_mb: int
    nvlink_peers: tuple[int, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["nvlink_peers"] = list(self.nvlink_peers)
        return data


class GpuSource(Protocol):
    kind: str  # "nvml" or "simulated"

    def inventory(self) -> list[GpuInfo]: ...

    def close(self) -> None: ...
