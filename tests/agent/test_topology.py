"""GPU-to-GPU topology read through NVML (the fake of the same interface) and NICs from sysfs."""

from pathlib import Path

from gpurental.agent.gpus import NvmlSource, SimulatedSource
from gpurental.agent.topology import host_topology, read_nics
from tests.fakes import fake_pynvml


def test_nvswitch_board_reads_every_pair_as_nvswitch():
    fake_pynvml.install(fake_pynvml.nvswitch_layout(8))
    topology = NvmlSource(module=fake_pynvml).topology()
    assert topology["fabric"] == "nvswitch"
    assert topology["source"] == "nvml"
    matrix = topology["matrix"]
    assert [matrix[i][i] for i in range(8)] == ["X"] * 8
    assert {matrix[i][j] for i in range(8) for j in range(8) if i != j} == {"NVS"}
    assert [gpu["nvlinks"] for gpu in topology["gpus"]] == [18] * 8
    assert topology["gpus"][1]["pci_bus_id"] == "00000000:2A:00.0"


def test_nvlink_bridged_pairs_count_active_links_and_fall_back_to_pcie():
    fake_pynvml.install(fake_pynvml.nvlink_pairs_layout(links_per_pair=4))
    topology = NvmlSource(module=fake_pynvml).topology()
    matrix = topology["matrix"]
    assert topology["fabric"] == "nvlink"
    # Four active links to the peer; the two inactive ones are not counted.
    assert matrix[0][1] == matrix[1][0] == "NV4"
    assert matrix[2][3] == "NV4"
    assert matrix[0][2] == matrix[1][3] == "PXB"  # different PCIe switches, one root
    assert [gpu["nvlinks"] for gpu in topology["gpus"]] == [4, 4, 4, 4]


def test_pcie_only_layout_reads_the_pcie_tree():
    fake_pynvml.install(fake_pynvml.pcie_layout(8))
    topology = NvmlSource(module=fake_pynvml).topology()
    matrix = topology["matrix"]
    assert topology["fabric"] == "pcie"
    assert matrix[0][1] == "PIX"  # one switch
    assert matrix[0][2] == "PXB"  # two switches under one root
    assert matrix[0][5] == "SYS"  # the other socket
    assert [gpu["nvlinks"] for gpu in topology["gpus"]] == [0] * 8
    # A board without NVLink answers NOT_SUPPORTED on link 0: one query per GPU, no more.
    assert fake_pynvml.state.calls["nvmlDeviceGetNvLinkState"] == 8


def test_old_driver_without_remote_device_type_still_tells_switch_from_gpu(monkeypatch):
    fake_pynvml.install(fake_pynvml.nvswitch_layout(4))

    def unsupported(handle, link):
        raise fake_pynvml.NVMLError(fake_pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(fake_pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType", unsupported)
    matrix = NvmlSource(module=fake_pynvml).topology()["matrix"]
    assert matrix[0][3] == "NVS"  # the remote address is no GPU of this host: a switch


def test_simulated_source_says_it_is_simulated():
    sxm = SimulatedSource(host_name="n", model_name="NVIDIA H100 80GB HBM3", count=8).topology()
    assert sxm["source"] == "simulated" and sxm["fabric"] == "nvswitch"
    pcie = SimulatedSource(host_name="n", model_name="NVIDIA L4", count=4).topology()
    assert pcie["fabric"] == "pcie"
    assert pcie["matrix"][0][1] == "PIX" and pcie["matrix"][0][3] == "SYS"


def _nic(root: Path, name: str, *, speed: str | None, type_: str = "1", rdma: str = "") -> None:
    base = root / "class" / "net" / name
    (base / "device").mkdir(parents=True)
    (base / "type").write_text(type_ + "\n")
    if speed is not None:
        (base / "speed").write_text(speed + "\n")
    if rdma:
        (base / "device" / "infiniband" / rdma).mkdir(parents=True)


def test_nics_from_sysfs_tell_infiniband_roce_and_ethernet(tmp_path):
    _nic(tmp_path, "eno1", speed="25000")
    _nic(tmp_path, "ens1f0", speed="400000", rdma="mlx5_1")  # RoCE
    _nic(tmp_path, "ib0", speed="-1", type_="32", rdma="mlx5_0")
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    _nic(tmp_path, "eth9", speed="-1")  # link down
    (tmp_path / "class" / "net" / "docker0").mkdir()  # virtual: no device
    assert read_nics(str(tmp_path)) == [
        {"name": "eno1", "speed_mbps": 25000, "kind": "ethernet", "rdma": None},
        {"name": "ens1f0", "speed_mbps": 400000, "kind": "roce", "rdma": "mlx5_1"},
        {"name": "eth9", "speed_mbps": None, "kind": "ethernet", "rdma": None},
        {"name": "ib0", "speed_mbps": 400000, "kind": "infiniband", "rdma": "mlx5_0"},
    ]


def test_host_topology_puts_gpus_and_nics_together(tmp_path):
    _nic(tmp_path, "ib0", speed="400000", type_="32", rdma="mlx5_0")
    fake_pynvml.install(fake_pynvml.nvswitch_layout(8))
    topology = host_topology(NvmlSource(module=fake_pynvml), sys_root=str(tmp_path))
    assert topology["fabric"] == "nvswitch"
    assert topology["nics"][0]["kind"] == "infiniband"
