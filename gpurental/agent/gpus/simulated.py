"""A stand-in for hosts without NVIDIA GPUs: the same inventory shape, clearly labelled.

Its telemetry (``sample``) is made up, plausibly and honestly:

- a GPU no instance holds idles: 0 % utilisation, no memory in use, ~30 °C, idle
  power, idle clock;
- a GPU an instance holds follows that instance's activity, which the agent
  measures as the CPU time its container (or process tree) used over the last
  tick: one busy CPU core or more reads as a fully busy GPU, an idle JupyterLab as
  ~0 %. So running a cell makes the charts move, and a forgotten notebook looks
  idle (and is stopped by the idle policy) like on real hardware;
- when the agent cannot measure that activity (unknown cgroup layout) the GPU
  follows a bounded random walk between 20 and 90 %, seeded per GPU, so it is
  never mistaken for idle.

Numbers are smoothed (a GPU does not jump from 0 to 100 % and back each second),
memory stays allocated once used (as with PyTorch's caching allocator), and
temperature, power and SM clock follow utilisation. Every message built from it
carries ``simulated: true`` and the console says so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpurental.agent.gpus.base import GpuInfo, GpuSample
from gpurental.agent.topology import simulated_gpu_topology

# Memory of the models the demo offers, in MiB as NVML reports it.
KNOWN_MEMORY_MB = {
    "NVIDIA A10G": 23028,
    "NVIDIA A10": 23028,
    "NVIDIA L4": 23034,
    "NVIDIA A100-SXM4-80GB": 81920,
    "NVIDIA H100 80GB HBM3": 81559,
}
NVLINK_MODELS = {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}
# (idle W, board power limit W, boost SM clock MHz) from the vendors' data sheets.
POWER_PROFILE = {
    "NVIDIA A10G": (15.0, 300.0, 1710),
    "NVIDIA A10": (15.0, 150.0, 1695),
    "NVIDIA L4": (16.0, 72.0, 2040),
    "NVIDIA A100-SXM4-80GB": (55.0, 400.0, 1410),
    "NVIDIA H100 80GB HBM3": (70.0, 700.0, 1980),
}
IDLE_SM_CLOCK = 210


@dataclass
class _GpuState:
    rng: random.Random
    load: float = 0.0  # smoothed 0..1
    memory: float = 0.0  # fraction of memory in use
    temp: float = 30.0
    walk: float = 0.5


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


class SimulatedSource:
    kind = "simulated"
    driver_version = "simulated"
    driver_cuda = None  # no driver: the image's CPU build runs

    def __init__(self, *, host_name: str, model_name: str = "NVIDIA A10G", count: int = 8):
        if count < 1:
            raise ValueError("a simulated host needs at least one GPU")
        self.host_name = host_name
        self.model_name = model_name
        self.count = count
        # Seeded per GPU: the same host and index always produce the same walk.
        self._state = [
            _GpuState(rng=random.Random(f"{host_name}:{i}"))  # noqa: S311 - not security
            for i in range(count)
        ]

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

    def topology(self) -> dict:
        return simulated_gpu_topology(self.count, nvlink=self.model_name in NVLINK_MODELS)

    def sample(self, *, activity: dict[int, float | None] | None = None) -> list[GpuSample]:
        activity = activity or {}
        idle_w, max_w, boost = POWER_PROFILE.get(self.model_name, (20.0, 300.0, 1700))
        total = KNOWN_MEMORY_MB.get(self.model_name, 24576) * 1024 * 1024
        samples = []
        for index, state in enumerate(self._state):
            held = index in activity
            if not held:
                target = 0.0
            elif activity[index] is None:
                state.walk = _clamp(state.walk + state.rng.uniform(-0.08, 0.08), 0.2, 0.9)
                target = state.walk
            else:
                target = _clamp(float(activity[index]), 0.0, 1.0)
            state.load = 0.4 * state.load + 0.6 * target
            if state.load < 0.005:
                state.load = 0.0
            if held:
                # Memory stays allocated once used, and drains slowly when work stops.
                state.memory = max(state.memory * 0.995, 0.04 + 0.6 * state.load)
            else:
                state.memory = 0.0
            state.temp += (30.0 + 48.0 * state.load - state.temp) * 0.15
            util = 0.0
            if state.load > 0:
                util = _clamp(100 * state.load + state.rng.gauss(0, 1.5), 0.0, 100.0)
            samples.append(
                GpuSample(
                    index=index,
                    util=round(util, 1),
                    mem_used=int(total * state.memory),
                    mem_total=total,
                    temp=round(state.temp, 1),
                    power=round(idle_w + (max_w - idle_w) * state.load, 1),
                    sm_clock=boost if state.load >= 0.01 else IDLE_SM_CLOCK,
                )
            )
        return samples

    def close(self) -> None:
        pass
