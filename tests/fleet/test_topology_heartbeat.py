"""The topology travels with the agent's inventory: read through NVML on the host (the fake
of the same interface), signed in its heartbeat, stored on the host by the control plane."""

from __future__ import annotations

from celery import Celery

from gpurental import protocol
from gpurental.agent.gpus import NvmlSource
from gpurental.agent.host import HostAgent
from gpurental.agent.reporter import ControlReporter
from gpurental.fleet.models import HostStatus
from gpurental.fleet.tasks import host_heartbeat
from tests.fakes import fake_pynvml


class CapturingApp:
    def __init__(self):
        self.sent: list[dict] = []
        self.conf = Celery("capturing", broker="redis://").conf

    def send_task(self, name, kwargs=None, queue=None, **options):
        self.sent.append({"name": name, "kwargs": kwargs or {}})


class IdleRuntime:
    """A runtime with nothing running (this test is about the inventory, not instances)."""

    name = "memory"

    def list_instances(self):
        return {}

    def workspace_usage(self):
        return {}


def beat(host, source) -> list[dict]:
    app = CapturingApp()
    agent = HostAgent(
        runtime=IdleRuntime(),
        source=source,
        reporter=ControlReporter(app, host_name=host.name, token=host.token),
        bind_address="127.0.0.1",
    )
    agent.refresh_state()
    agent.heartbeat()
    return [m["kwargs"] for m in app.sent if m["name"] == protocol.HEARTBEAT]


def test_an_hgx_hosts_topology_is_stored_from_its_heartbeat(make_host, a100):
    a100.nvml_names = ["NVIDIA H100 80GB HBM3"]
    a100.save()
    host = make_host("hgx-7", a100, count=0)
    fake_pynvml.install(fake_pynvml.nvswitch_layout(8))
    (message,) = beat(host, NvmlSource(module=fake_pynvml))
    host_heartbeat(**message)
    host.refresh_from_db()
    assert host.topology["fabric"] == "nvswitch"
    assert host.topology["matrix"][0][7] == "NVS"
    assert isinstance(host.topology["nics"], list)  # this machine's own, from sysfs
    assert host.gpus.count() == 8 and host.status == HostStatus.ACTIVE


def test_an_oversized_topology_is_not_kept(make_host, a100):
    host = make_host("big-1", a100, count=1)
    key = protocol.host_key(host.token)
    message = protocol.sign(
        key,
        {
            "host": host.name,
            "inventory": None,
            "topology": {"fabric": "pcie", "nics": [{"name": "x" * 100}] * 1000},
            "containers": None,
            "runtime": "memory",
            "gpu_source": "simulated",
            "agent_version": "t",
        },
    )
    host_heartbeat(**message)
    host.refresh_from_db()
    assert host.topology == {}


def test_the_drivers_cuda_is_stored_from_the_heartbeat(make_host, a100):
    """NVML's nvmlSystemGetCudaDriverVersion (12040 for driver 550.54) rides with the
    topology; the host keeps it for placement (fleet.drivers)."""
    a100.nvml_names = ["NVIDIA L4"]
    a100.save()
    host = make_host("pcie-1", a100, count=0)
    fake_pynvml.install(fake_pynvml.pcie_layout(2))
    (message,) = beat(host, NvmlSource(module=fake_pynvml))
    host_heartbeat(**message)
    host.refresh_from_db()
    assert (host.driver_version, host.driver_cuda, host.driver_cuda_text) == (
        "550.54.15",
        12040,
        "12.4",
    )
