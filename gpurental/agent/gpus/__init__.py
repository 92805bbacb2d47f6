"""GPU sources: what GPUs a host has (and, with the telemetry issue, how busy they are).

``NvmlSource`` reads real NVIDIA GPUs through NVML (``pynvml``); ``SimulatedSource``
stands in on hosts without them. Nothing else imports ``pynvml``.
"""

from gpurental.agent.gpus.base import GpuInfo, GpuSample, GpuSource
from gpurental.agent.gpus.nvml import NvmlSource, NvmlUnavailable
from gpurental.agent.gpus.simulated import SimulatedSource


def make_source(
    kind: str, *, host_name: str, simulated_model: str = "NVIDIA A10G", simulated_count: int = 8
):
    if kind == "nvml":
        return NvmlSource()
    if kind == "simulated":
        return SimulatedSource(
            host_name=host_name, model_name=simulated_model, count=simulated_count
        )
    raise ValueError(f"GPU source {kind!r}: use 'nvml' or 'simulated'")


__all__ = [
    "GpuInfo",
    "GpuSample",
    "GpuSource",
    "NvmlSource",
    "NvmlUnavailable",
    "SimulatedSource",
    "make_source",
]
