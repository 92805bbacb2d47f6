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

    def topology(self) -> dict:
        """How each pair of GPUs is connected (``agent/topology.py`` says the shape)."""
        ...

    def sample(self, *, activity: dict[int, float | None] | None = None) -> list[GpuSample]:
        """Every GPU's numbers now; never blocks much longer than a tick's deadline.

        ``activity`` maps the indices of GPUs held by an instance to how busy that
        instance is (0..1, None when unknown); only the simulated source uses it.
        """
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GpuSample:
    """One GPU's numbers for one sampler tick.

    ``None`` means "not available" (e.g. power on a board that does not report it);
    ``stale`` means the source did not answer within the tick's deadline, so every
    number is ``None`` for this tick.
    """

    index: int
    util: float | None = None  # % of the sample period a kernel ran (NVML's "gpu" rate)
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    temp: float | None = None  # °C
    power: float | None = None  # W
    sm_clock: int | None = None  # MHz
    stale: bool = False

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def stale_for(cls, index: int) -> GpuSample:
        return cls(index=index, stale=True)
