"""A stand-in for hosts without NVIDIA GPUs: the same inventory shape, clearly labelled."""

from __future__ import annotations

from gpurental.agent.gpus.base import GpuInfo

# Memory of the models the demo offers, in MiB as NVML reports it.
KNOWN_MEMORY_MB = {
    "NVIDIA A10G": 23028,
    "NVIDIA L4": 23034,
    "NVIDIA A100-SXM4-80GB": 81920,
    "NVIDIA H100 80GB HBM3": 81559,
}
NVLINK_MODELS = {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}


class SimulatedSource:
    kind = "simulated"
    driver_version = "simulated"

    def __init__(self, *, host_name: str, model_name: str = "NVIDIA A10G", count: int = 8):
        if count < 1:
            raise ValueError("a simulated host needs at least one GPU")
        self.host_name = host_name
        self.model_name = model_name
        self.count = count

    def inventory(self) -> list[GpuInfo]:
        nvlink = self.model_name in NVLINK_MODELS
        return [
            GpuInfo(
                index=i,
                uuid=f"GPU-sim-{self.host_name}-{i}",
                name=self.model_name,
                memory_mb=KNOWN_MEMORY_MB.get(self.model_name, 24576),
                nvlink_peers=tuple(j for j in range(self.count) if j != i) if nvlink else (),
            )
            for i in range(self.count)
        ]

    def close(self) -> None:
        pass
