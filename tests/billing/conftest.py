from datetime import time
from decimal import Decimal

import pytest

from gpurental.billing.services import credit_add
from gpurental.fleet.models import Host
from gpurental.rentals.services import lifecycle as lc
from tests.factories import GPUModelFactory, PlanFactory


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    # UserFactory sets a password; PBKDF2 would cost ~0.35 s per user here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def balance_enforced(settings):
    """Billing tests check the balance on launch, whatever the suite-wide default is
    (this overrides a fixture of the same name in tests/conftest.py, if there is one)."""
    settings.BILLING_ENFORCE_BALANCE = True


@pytest.fixture
def h100(db):
    return GPUModelFactory(
        slug="h100-80gb", name="H100 80GB SXM", short_name="H100", nvml_names=["NVIDIA H100"]
    )


@pytest.fixture
def plan(h100):
    """2× H100 at 4.00/h for the plan; 25 % off 00:00–08:00: 3.00/h off-peak."""
    return PlanFactory(
        gpu_model=h100,
        gpu_count=2,
        slug="h100-x2",
        name="2× H100",
        hourly_rate=Decimal("4.0000"),
        off_peak_discount=Decimal("0.25"),
        off_peak_start=time(0),
        off_peak_end=time(8),
    )


@pytest.fixture
def berlin(settings):
    settings.TIME_ZONE = "Europe/Berlin"
    return settings


@pytest.fixture
def funded(alice):
    credit_add(user=alice, amount=Decimal("1000.00"), description="test credit")
    return alice


def beat(host, at):
    """The host's agent heart-beats at ``at``."""
    Host.objects.filter(pk=host.pk).update(last_heartbeat_at=at)
    host.last_heartbeat_at = at


@pytest.fixture
def run_instance(image, sent):
    """Launch ``plan`` for ``user`` at ``at`` on ``host`` and report it running then."""

    def launch(user, plan, host, at, name=""):
        beat(host, at)
        instance = lc.instance_launch(user=user, image=image, plan=plan, name=name, now=at)
        lc.instance_report_running(
            instance_id=str(instance.pk), port=4000, container_id="c", now=at
        )
        instance.refresh_from_db()
        return instance

    return launch


@pytest.fixture
def stop_instance(sent):
    def stop(instance, at):
        beat(instance.host, at)
        lc.instance_stop(instance=instance, now=at)
        lc.instance_report_stopped(instance_id=str(instance.pk), now=at)
        instance.refresh_from_db()
        return instance

    return stop


@pytest.fixture
def start_instance(sent):
    def start(instance, at):
        beat(instance.host, at)
        lc.instance_start(instance=instance, now=at)
        lc.instance_report_running(
            instance_id=str(instance.pk), port=4000, container_id="c", now=at
        )
        instance.refresh_from_db()
        return instance

    return start
