"""RabbitMQ restarts: the control worker and the agent reconnect by themselves, and a
launch issued around the restart ends running exactly once.

The suite's RabbitMQ (127.0.0.1:5672) is shared, so this test runs its own throwaway node
on a spare port and restarts that one (``gpurental.testing.rabbitmq``)."""

from __future__ import annotations

import pytest

from gpurental.billing.models import Charge
from gpurental.billing.services.metering import meter_run
from gpurental.celery_app import app as control_app
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.testing import rabbitmq
from gpurental.testing.agent_process import wait_for
from tests.agent.conftest import skip_unless_ci
from tests.rentals.test_host_faults import gpus_held, jupyter, wait_status

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
S = InstanceStatus


def _use_broker(url: str) -> None:
    """Point the control plane's Celery app (senders and the in-process worker) at ``url``."""
    control_app.conf.broker_url = url
    control_app._pool = None  # noqa: SLF001 - the pools are made for one broker URL
    control_app.amqp._producer_pool = None  # noqa: SLF001


@pytest.fixture
def rabbit(tmp_path, settings):
    """A throwaway RabbitMQ node as the broker of the control plane and the agent. Listed
    before ``agent``, it is set up before the control worker and the agent start."""
    problem = rabbitmq.available()
    if problem:
        skip_unless_ci(problem)
    node = rabbitmq.RabbitNode(tmp_path / "rabbitmq")
    node.start()
    previous = control_app.conf.broker_url
    settings.CELERY_BROKER_URL = node.url  # the agent fixture's broker
    _use_broker(node.url)
    # The control worker's fixture purges its queues first: they must exist on a new node.
    names = {control_app.conf.task_default_queue}
    names |= {route["queue"] for route in control_app.conf.task_routes.values()}
    with control_app.connection_for_write() as conn:
        for name in sorted(names):
            control_app.amqp.queues[name](conn.default_channel).declare()
    try:
        yield node
    finally:
        _use_broker(previous)
        node.stop()


def test_rabbitmq_restarted_around_a_launch_it_ends_running_once(
    rabbit, agent, catalog, alice, docker_client
):
    model, image = catalog
    instance = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    rabbit.restart()  # the start command is on its way to the agent
    instance = wait_status(instance, S.RUNNING, agent, timeout=60)
    label = {"label": f"gpurental.instance={instance.pk}"}
    assert len(docker_client.containers.list(all=True, filters=label)) == 1
    assert instance.events.filter(kind="transition", to_status=S.RUNNING).count() == 1
    assert gpus_held(instance) == 1
    assert jupyter(instance, "/api/status")[0] == 200

    # Both sides took up the broker again: a stop goes out and its report comes back.
    lc.instance_stop(instance=instance)
    wait_status(instance, S.STOPPED, agent, timeout=60)
    label = {"label": f"gpurental.instance={instance.pk}"}
    wait_for(lambda: not docker_client.containers.list(filters=label), 30, "the container stopped")
    meter_run()
    starts = list(Charge.objects.filter(instance=instance).values_list("period_start", flat=True))
    assert len(starts) == len(set(starts))
