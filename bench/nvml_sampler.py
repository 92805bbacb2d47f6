"""The agent's GPU readings on this machine's real GPUs, through NVML.

Opens ``NvmlSource`` (what the agent's sampler reads every second), prints the inventory
and topology it reports, then samples every ``--interval`` seconds for ``--seconds``,
with a load (bf16 matrix products on GPU 0 through torch, when torch has CUDA) during the
middle third, and prints each tick's readings and how long a tick's ``sample()`` took.

    python bench/nvml_sampler.py [--seconds 15] [--interval 0.5]   # a GPU machine
    python bench/nvml_sampler.py --smoke                            # the fake pynvml

``--smoke`` reads the fake ``pynvml`` of the tests (two simulated L4s, no load): it checks
the bench still runs; its figures are not a GPU's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpurental.agent.gpus import NvmlSource  # noqa: E402 - after sys.path
from gpurental.agent.gpus.nvml import SAMPLE_DEADLINE_S  # noqa: E402


def fake_module():
    from tests.fakes import fake_pynvml

    fake_pynvml.install(fake_pynvml.pcie_layout(2))
    return fake_pynvml


class Load:
    """bf16 matrix products on cuda:0 until stopped (nothing without torch or CUDA)."""

    def __init__(self):
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.products = 0

    def start(self) -> bool:
        try:
            import torch
        except ImportError:
            return False
        if not torch.cuda.is_available():
            return False

        def run():
            a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
            while not self.stop.is_set():
                for _ in range(10):
                    a @ a
                torch.cuda.synchronize()
                self.products += 10

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return True

    def end(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--smoke", action="store_true", help="the fake pynvml, 2 s")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.interval = 2.0, 0.2
    opened = time.perf_counter()
    source = NvmlSource(module=fake_module() if args.smoke else None)
    open_ms = (time.perf_counter() - opened) * 1000
    gpus = source.inventory()
    print(
        f"NVML{' (the fake pynvml)' if args.smoke else ''}: driver {source.driver_version}, "
        f"{len(gpus)} GPU(s), opened in {open_ms:.1f} ms"
    )
    for gpu in gpus:
        peers = ",".join(map(str, gpu.nvlink_peers)) or "none"
        print(f"  {gpu.index}: {gpu.name}  {gpu.uuid}  {gpu.memory_mb} MiB  NVLink peers {peers}")
    topology = source.topology()
    print(f"  topology: fabric {topology['fabric']}; matrix {topology['matrix']}")

    load = Load()
    loaded = False
    took: list[float] = []
    stale = 0
    print(
        f"\n{'t (s)':>6} {'load':>5} {'util %':>7} {'mem used MiB':>13} {'temp °C':>8} "
        f"{'power W':>8} {'SM MHz':>7} {'tick ms':>8}"
    )
    started = time.perf_counter()
    tick = 0
    while (elapsed := time.perf_counter() - started) < args.seconds:
        third = args.seconds / 3
        if not loaded and elapsed >= third and load.thread is None:
            loaded = load.start()
        if load.thread is not None and not load.stop.is_set() and elapsed >= 2 * third:
            load.end()
        t0 = time.perf_counter()
        samples = source.sample()
        took.append((time.perf_counter() - t0) * 1000)
        stale += sum(s.stale for s in samples)
        s = samples[0]
        busy = "yes" if load.thread is not None and not load.stop.is_set() else ""
        mem = f"{s.mem_used / 2**20:.0f}" if s.mem_used is not None else "—"
        print(
            f"{elapsed:6.1f} {busy:>5} {s.util if s.util is not None else '—':>7} {mem:>13} "
            f"{s.temp if s.temp is not None else '—':>8} "
            f"{s.power if s.power is not None else '—':>8} "
            f"{s.sm_clock if s.sm_clock is not None else '—':>7} {took[-1]:8.2f}"
        )
        tick += 1
        time.sleep(max(0.0, started + tick * args.interval - time.perf_counter()))
    load.end()
    source.close()
    took.sort()
    p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
    print(
        f"\n{len(took)} ticks of {len(gpus)} GPU(s): sample() p50 "
        f"{statistics.median(took):.2f} ms, p99 {p99:.2f} ms, max {took[-1]:.2f} ms "
        f"(deadline {SAMPLE_DEADLINE_S * 1000:.0f} ms); stale readings: {stale}"
        + (f"; load: {load.products} bf16 8192³ products on GPU 0" if loaded else "; no load")
    )
    if stale or took[-1] > SAMPLE_DEADLINE_S * 1000 * 1.5:
        print("a tick went stale or past its deadline")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
