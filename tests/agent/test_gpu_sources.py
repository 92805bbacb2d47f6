"""GPU inventory through NVML (with a fake pynvml of the same interface) and the simulated source."""

import pytest

from gpurental.agent.gpus import NvmlSource, NvmlUnavailable, SimulatedSource, make_source
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice


def _hgx(count=8):
    """An HGX board: every GPU NVLink-connected to every other through NVSwitch."""
    return [
        FakeDevice(uuid=f"GPU-h100-{i}", nvlink_peers={j for j in range(count) if j != i})
        for i in range(count)
    ]


def test_nvml_inventory_reports_name_uuid_memory_and_nvlink_peers():
    fake_pynvml.install(_hgx(4))
    source = NvmlSource(module=fake_pynvml)
    gpus = source.inventory()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[2].uuid == "GPU-h100-2"
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].memory_mb == 81559
    assert gpus[0].nvlink_peers == (1, 2, 3)
    assert source.driver_version == "550.54.15"


def test_nvml_pcie_pairs_have_no_nvlink_peers():
    devices = [
        FakeDevice(name="NVIDIA L4", uuid=f"GPU-l4-{i}", p2p_supported=False) for i in range(2)
    ]
    fake_pynvml.install(devices)
    assert [g.nvlink_peers for g in NvmlSource(module=fake_pynvml).inventory()] == [(), ()]


def test_nvml_partial_nvlink_pairs():
    devices = [
        FakeDevice(uuid="GPU-a", nvlink_peers={1}),
        FakeDevice(uuid="GPU-b", nvlink_peers={0}),
        FakeDevice(uuid="GPU-c", nvlink_peers={3}),
        FakeDevice(uuid="GPU-d", nvlink_peers={2}),
    ]
    fake_pynvml.install(devices)
    peers = [g.nvlink_peers for g in NvmlSource(module=fake_pynvml).inventory()]
    assert peers == [(1,), (0,), (3,), (2,)]


def test_nvml_handles_are_opened_once():
    fake_pynvml.install(_hgx(2))
    source = NvmlSource(module=fake_pynvml)
    for _ in range(5):
        source.inventory()
    assert fake_pynvml.state.calls["nvmlInit"] == 1
    assert fake_pynvml.state.calls["nvmlDeviceGetHandleByIndex"] == 2


def test_nvml_without_driver_says_so():
    fake_pynvml.install(_hgx(1), driver_loaded=False)
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        NvmlSource(module=fake_pynvml)


def test_nvml_without_gpus_says_so():
    fake_pynvml.install([])
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        NvmlSource(module=fake_pynvml)


def test_nvml_close_shuts_nvml_down():
    fake_pynvml.install(_hgx(1))
    source = NvmlSource(module=fake_pynvml)
    source.close()
    assert fake_pynvml.state.calls["nvmlShutdown"] == 1


def test_simulated_source_is_stable_and_labelled():
    source = SimulatedSource(host_name="lab", model_name="NVIDIA A100-SXM4-80GB", count=4)
    first, second = source.inventory(), source.inventory()
    assert first == second
    assert source.kind == "simulated"
    assert [g.uuid for g in first] == [f"GPU-sim-lab-{i}" for i in range(4)]
    assert first[0].nvlink_peers == (1, 2, 3)
    assert first[0].memory_mb == 81920


def test_simulated_pcie_model_has_no_nvlink():
    gpus = make_source(
        "simulated", host_name="x", simulated_model="NVIDIA A10G", simulated_count=2
    ).inventory()
    assert [g.nvlink_peers for g in gpus] == [(), ()]


def test_unknown_source_kind_is_refused():
    with pytest.raises(ValueError, match="GPU source 'cuda'"):
        make_source("cuda", host_name="x")
