"""The NVML source on a real NVIDIA GPU (skipped where NVML cannot start: no driver here).

The other NVML tests drive ``NvmlSource`` through the fake ``pynvml``; these read the real
library on real hardware and check what the fake cannot: that the driver's answers have
the shape and ranges the platform stores, that a tick stays inside its deadline, and that
utilisation rises while a kernel runs. Run on a GPU machine with, from the repository
root (no Django, no database needed):

    python3 -m pytest -c /dev/null --rootdir . -p no:cacheprovider -p no:django --noconftest tests/agent/test_nvml_hardware.py
"""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from gpurental.agent.gpus import NvmlSource, NvmlUnavailable
from gpurental.agent.gpus.nvml import SAMPLE_DEADLINE_S


def _real_source() -> NvmlSource | None:
    if importlib.util.find_spec("pynvml") is None:
        return None
    try:
        return NvmlSource()
    except NvmlUnavailable:
        return None


@pytest.fixture(scope="module")
def source():
    found = _real_source()
    if found is None:
        pytest.skip("no NVIDIA driver here: NVML cannot start (these run on a GPU machine)")
    yield found
    found.close()


def test_inventory_names_each_gpu_with_its_uuid_and_memory(source):
    gpus = source.inventory()
    assert gpus, "NVML started but listed no GPU"
    assert [g.index for g in gpus] == list(range(len(gpus)))
    for gpu in gpus:
        assert gpu.uuid.startswith("GPU-") and len(gpu.uuid) > 20
        assert gpu.name.startswith("NVIDIA ")
        assert gpu.memory_mb > 1024
        assert all(0 <= peer < len(gpus) and peer != gpu.index for peer in gpu.nvlink_peers)
    assert source.driver_version.split(".")[0].isdigit()


def test_a_sample_is_in_range_and_inside_the_tick_deadline(source):
    source.sample()  # the first tick starts the worker threads
    started = time.perf_counter()
    samples = source.sample()
    took = time.perf_counter() - started
    assert took < SAMPLE_DEADLINE_S
    assert len(samples) == len(source.handles)
    for s in samples:
        assert not s.stale
        assert 0 <= s.util <= 100
        assert 0 < s.mem_used <= s.mem_total
        assert 0 < s.temp < 120
        assert s.power is None or 0 < s.power < 2000
        assert s.sm_clock > 0


def test_topology_is_a_square_matrix_over_the_gpus(source):
    topology = source.topology()
    count = len(source.handles)
    matrix = topology["matrix"]
    assert len(matrix) == count and all(len(row) == count for row in matrix)
    assert all(matrix[i][i] == "X" for i in range(count))
    assert [g["index"] for g in topology["gpus"]] == list(range(count))
    assert all(":" in g["pci_bus_id"] for g in topology["gpus"])


def test_utilisation_rises_while_a_kernel_runs(source):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch here has no CUDA")
    idle = source.sample()[0].util
    stop = threading.Event()

    def load():
        a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        busy = []
        for _ in range(8):
            time.sleep(0.25)
            busy.append(source.sample()[0].util)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert max(busy) >= 50, (idle, busy)
