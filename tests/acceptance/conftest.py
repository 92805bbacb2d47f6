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
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield port
    server.terminate()
    server.wait(timeout=10)
