import pytest
from celery import Celery

from gpurental.acceptance.models import NominalSpec
from gpurental.fleet.models import HostStatus


class CapturingApp:
    """Stands in for the agent's Celery app: keeps what it would publish."""

    def __init__(self):
        self.sent: list[dict] = []
        self.conf = Celery("capturing", broker="redis://").conf

    def send_task(self, name, kwargs=None, queue=None, **options):
        self.sent.append({"name": name, "queue": queue, "kwargs": kwargs or {}})


@pytest.fixture
def capturing_app():
    return CapturingApp()


@pytest.fixture
def joining_host(make_host, a100):
    """A host with 8 simulated A100s, heart-beating, in acceptance."""
    host = make_host("node-a", a100, count=8, status=HostStatus.ACCEPTANCE)
    return host


@pytest.fixture
def cpu_nominal(db):
    """The CPU nominal as the data migration seeded it; tests set the figures they need."""
    return NominalSpec.objects.get(is_cpu=True)
