from decimal import Decimal

import pytest

from gpurental.baremetal.models import DedicatedPlan
from gpurental.baremetal.services import baremetal_host_set
from tests.factories import GPUModelFactory, PlanFactory


@pytest.fixture
def h100(db):
    return GPUModelFactory(slug="h100-80gb", name="H100 80GB", short_name="H100")


@pytest.fixture
def whole_host_plan(h100):
    """A whole 4× H100 host at 20.00/h; 30 % off-peak (00:00–08:00), 20 % reserved."""
    return DedicatedPlan.objects.create(
        slug="h100-host",
        name="Dedicated 4× H100 host",
        gpu_model=h100,
        gpu_count=4,
        vcpus=64,
        memory_gb=512,
        hourly_rate=Decimal("20.0000"),
        off_peak_discount=Decimal("0.30"),
        reserved_discount=Decimal("0.20"),
        instance_plan=PlanFactory(gpu_model=h100, gpu_count=4, slug="h100-x4"),
    )


@pytest.fixture
def one_gpu_plan(h100):
    return PlanFactory(gpu_model=h100, gpu_count=1, slug="h100-x1")


@pytest.fixture
def leasable(make_host, h100):
    """A host with ``count`` H100s that the operator offers as a dedicated host."""

    def make(name, count=4, **fields):
        network = fields.pop("allow_host_network", False)
        host = make_host(name, h100, count=count, **fields)
        baremetal_host_set(host=host, leasable=True, allow_host_network=network)
        return host

    return make
