import shutil
import socket
import subprocess
import time

import pytest

from gpurental.acceptance.models import NominalSpec
from gpurental.fleet.models import HostStatus
from tests.agent.conftest import skip_unless_ci


@pytest.fixture
def joining_host(make_host, a100):
    """A host with 8 simulated A100s, heart-beating, in acceptance."""
    host = make_host("node-a", a100, count=8, status=HostStatus.ACCEPTANCE)
    return host


@pytest.fixture
def cpu_nominal(db):
    """The CPU nominal as the data migration seeded it; tests set the figures they need.
    Seeded again where an earlier transactional test on this worker flushed the table."""
    from importlib import import_module

    from django.apps import apps

    import_module("gpurental.acceptance.migrations.0002_seed_nominal_specs").seed(apps, None)
    return NominalSpec.objects.get(is_cpu=True)


def _listening(port: int) -> bool:
    """Whether a socket listens on 127.0.0.1:``port`` (the kernel's table: no connection)."""
    wanted = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(
            line.split()[1] == wanted and line.split()[3] == "0A"  # 0A: LISTEN
            for line in list(table)[1:]
        )


@pytest.fixture
def iperf3_server():
    """A peer's ``iperf3 -s`` (Debian's iperf3), on loopback, for one test."""
    if shutil.which("iperf3") is None:
        skip_unless_ci("iperf3 is not installed: apt-get install -y iperf3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(  # noqa: S603
        ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],  # noqa: S607
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Wait until it listens, without connecting: iperf3 -s serves one client at a time and
    # takes a probe's connection for a test, so the real client could be refused ("unable
    # to receive control message: Connection reset by peer") while it drops the probe.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _listening(port):
        time.sleep(0.05)
    yield port
    server.terminate()
    server.wait(timeout=10)
