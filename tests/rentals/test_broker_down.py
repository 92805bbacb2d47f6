"""The message broker down when a command leaves: the request that made it still
succeeds (its rows are committed), a start or restart fails its launch at once with a
reason that says so, its GPUs are free again and nothing is charged; no launch waits
LAUNCH_TIMEOUT for an agent that will never hear of it."""

from __future__ import annotations

import pytest

from gpurental.billing.models import Charge
from gpurental.celery_app import app as control_app
from gpurental.rentals.models import Allocation, InstanceStatus
from gpurental.rentals.services import lifecycle as lc

S = InstanceStatus


@pytest.fixture
def broker_down(settings):
    """The control plane's Celery app pointed at a port nothing listens on."""
    settings.BILLING_ENFORCE_BALANCE = False
    previous = control_app.conf.broker_url

    def use(url):
        control_app.conf.broker_url = url
        control_app._pool = None  # noqa: SLF001 - the pools are made for one broker URL
        control_app.amqp._producer_pool = None  # noqa: SLF001

    use("redis://127.0.0.1:9/0")  # the discard port: connection refused
    try:
        yield
    finally:
        use(previous)


def test_a_launch_while_the_broker_is_down_fails_at_once_and_frees_its_gpus(
    alice, image, a100, make_host, broker_down, django_capture_on_commit_callbacks
):
    make_host("node1", a100, count=1)
    with django_capture_on_commit_callbacks(execute=True):
        instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    instance.refresh_from_db()
    assert instance.status == S.FAILED
    assert "could not be sent to host node1" in instance.status_reason
    assert "message broker is unreachable" in instance.status_reason
    assert "Nothing was charged" in instance.status_reason
    assert not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists()
    assert not Charge.objects.filter(instance=instance).exists()
    # The one GPU is free again: the next launch gets it (and fails the same way).
    with django_capture_on_commit_callbacks(execute=True):
        again = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    again.refresh_from_db()
    assert again.status == S.FAILED


def test_a_restart_while_the_broker_is_down_goes_back_to_stopped_keeping_the_workspace(
    alice, image, a100, make_host, broker_down, django_capture_on_commit_callbacks
):
    make_host("node1", a100, count=1)
    # Outside a captured block, on-commit sends never run: the launch's start is not sent.
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    lc.instance_report_running(instance_id=str(instance.pk), port=40000, container_id="c0")
    instance.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        lc.instance_restart(instance=instance)
    instance.refresh_from_db()
    assert instance.status == S.STOPPED
    assert "could not start" in instance.status_reason
    assert "/workspace kept" in instance.status_reason
    assert "message broker is unreachable" in instance.status_reason
