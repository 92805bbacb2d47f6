"""The control plane's own series, read back from /metrics: queues on the real broker,
task counts kept in Redis, websockets per stream, meter lag."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.utils import timezone

from gpurental.celery_app import app as control_app
from gpurental.observability import counters, queues
from gpurental.routing import websocket_urlpatterns
from tests.agent.conftest import skip_unless_ci
from tests.telemetry.test_metrics import parse, values

pytestmark = pytest.mark.django_db


def scrape(client, carol):
    client.force_login(carol)
    return parse(client.get("/metrics").content.decode())[1]


@pytest.mark.backend
def test_a_hosts_queue_shows_its_waiting_command_and_its_age(client, carol, a100, make_host):
    host = make_host(f"q-{uuid.uuid4().hex[:8]}", a100, count=1)
    queue = host.queue
    samples = scrape(client, carol)
    assert values(samples, "gpurental_queue_messages", queue=queue) == [0]
    assert values(samples, "gpurental_queue_oldest_message_age_seconds", queue=queue) == [0]
    control_app.send_task("gpurental.agent.instance_stop", kwargs={"x": 1}, queue=queue)
    control_app.send_task("gpurental.agent.instance_stop", kwargs={"x": 2}, queue=queue)
    time.sleep(1.1)
    try:
        samples = scrape(client, carol)
        assert values(samples, "gpurental_queue_messages", queue=queue) == [2]
        (age,) = values(samples, "gpurental_queue_oldest_message_age_seconds", queue=queue)
        assert 1.0 <= age < 30
        assert values(samples, "gpurental_broker_up") == [1]
        assert values(samples, "gpurental_queue_messages", queue="control")  # always listed
    finally:
        with control_app.connection_for_write() as conn:
            conn.default_channel.queue_purge(queue)


@pytest.fixture
def counted_task():
    """A control-plane task of this test's own name: one call succeeds, one raises."""
    name = f"tests.observability.task_{uuid.uuid4().hex[:8]}"

    @control_app.task(name=name)
    def work(fail: bool) -> None:
        if fail:
            raise RuntimeError("failed on purpose")

    return work


def test_task_runs_failures_and_durations_are_counted_for_every_process(
    client, carol, counted_task
):
    counted_task.apply(kwargs={"fail": False})
    counted_task.apply(kwargs={"fail": True})
    counted_task.apply(kwargs={"fail": False})
    samples = scrape(client, carol)
    name = counted_task.name
    assert values(samples, "gpurental_celery_task_runs_total", task=name) == [3]
    assert values(samples, "gpurental_celery_task_failures_total", task=name) == [1]
    assert values(samples, "gpurental_celery_task_duration_seconds_count", task=name) == [3]
    (inf,) = values(samples, "gpurental_celery_task_duration_seconds_bucket", task=name, le="+Inf")
    assert inf == 3


async def _fleet_count_becomes(n: int) -> bool:
    # The consumer counts itself just after its accept reaches the client.
    for _ in range(40):
        if counters.websocket_counts().get("fleet", 0) == n:
            return True
        await asyncio.sleep(0.05)
    return False


def test_open_websockets_are_counted_per_stream_and_uncounted_on_close(carol):
    before = counters.websocket_counts().get("fleet", 0)

    async def session():
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/fleet/")
        communicator.scope["user"] = carol
        connected, _ = await communicator.connect()
        assert connected
        opened = await _fleet_count_becomes(before + 1)
        await communicator.disconnect()
        return opened, await _fleet_count_becomes(before)

    assert async_to_sync(session)() == (True, True)


def test_a_dead_processes_websockets_expire(settings):
    r = counters.client()
    key = counters.WS_PROCESS + "gone-host:1:dead"
    r.hset(key, mapping={"instance": 5})
    r.expire(key, 1)
    assert counters.websocket_counts().get("instance", 0) >= 5
    time.sleep(1.5)
    assert r.exists(key) == 0


def test_meter_lag_is_the_oldest_unbilled_running_time(client, carol, alice, run_instance):
    run_instance(alice, now=timezone.now() - timedelta(minutes=7))
    (lag,) = values(scrape(client, carol), "gpurental_meter_lag_seconds")
    assert 7 * 60 <= lag < 8 * 60


def test_nothing_running_means_no_meter_lag(client, carol):
    assert values(scrape(client, carol), "gpurental_meter_lag_seconds") == [0]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_rabbitmq_queue_depth_without_the_management_api():
    if not _listening(5672):
        skip_unless_ci("no RabbitMQ on 127.0.0.1:5672")
    from kombu import Connection, Exchange, Queue

    url = "amqp://guest:guest@127.0.0.1:5672//"
    name = f"obs-test-{uuid.uuid4().hex[:8]}"
    with Connection(url) as conn:
        queue = Queue(name, Exchange(name), routing_key=name, auto_delete=False)
        producer = conn.Producer()
        for n in range(3):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key=name, declare=[queue])
        try:
            for _ in range(50):  # publishing is asynchronous: wait until all three are in
                if queues.queue_states(url, [name])[0].messages == 3:
                    break
                time.sleep(0.1)
            states = queues.queue_states(url, [name, f"{name}-never-declared"])
            assert [(s.queue, s.messages, s.oldest_age_s) for s in states] == [
                (name, 3, None),
                (f"{name}-never-declared", 0, None),
            ]
        finally:
            queue(conn.default_channel).delete()


def test_the_broker_url_decides_how_queues_are_read():
    assert queues.is_amqp("amqp://u:p@h//") and not queues.is_amqp(
        django_settings.CELERY_BROKER_URL
    )


def test_a_groups_replicas_and_its_endpoints_load_are_series(client, carol, alice, a100, make_host):
    """What the group's endpoint wrote to Redis (as a gateway process does) and its
    replicas by role, with the owner as an opaque id."""
    from gpurental.groups import services
    from gpurental.groups.load import load_write
    from gpurental.rentals.events import state_redis
    from tests.factories import ImageTemplateFactory

    make_host("g1", a100, count=4)
    ImageTemplateFactory(slug="serving-echo", port=8000, http_ports=[8000])
    spec = {"name": "web", "instance_type": "A100", "min_nodes": 2, "max_nodes": 3}
    group = services.group_apply(user=alice, source=spec).group
    services.group_tick(group_id=group.pk)
    report = {"at": time.time(), "rps": 12.5, "inflight": 3.0, "queued": 1.0, "burst": 4.0,
              "inflight_now": 3, "queued_now": 2, "p50_ms": 40.0, "p99_ms": 250.0, "errors": 1,
              "requests": 750, "last_request_at": time.time(), "replicas": {}}  # fmt: skip
    load_write(state_redis(), group.pk, report, process="test-gateway")
    samples = scrape(client, carol)
    key = {"group_id": str(group.pk), "customer": str(alice.pk)}
    assert values(samples, "gpurental_group_replicas", **key, role="serving", status="pending") == [
        2
    ]
    assert values(samples, "gpurental_group_requests_per_second", **key) == [12.5]
    assert values(samples, "gpurental_group_latency_p99_seconds", **key) == [0.25]
    assert values(samples, "gpurental_group_queued_requests", **key) == [2]
    assert values(samples, "gpurental_group_errors", **key) == [1]
    assert alice.email not in client.get("/metrics").content.decode()


def test_the_instance_gateways_answers_are_counted_for_metrics(client, carol):
    """A real gateway process's worth (in this process, on a test server) answers three
    requests; within its next report /metrics shows them, by status class, with their
    durations."""
    from aiohttp.test_utils import TestServer

    from gpurental.gateway.http import Gateway
    from gpurental.gateway.stats import KEY_PREFIX
    from gpurental.rentals.events import state_redis

    for key in state_redis().scan_iter(match=KEY_PREFIX + "*"):
        state_redis().delete(key)

    async def scenario():
        import aiohttp

        gateway = Gateway(domain="gw.test", scheme="http")
        server = TestServer(gateway.app(), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                for host in (f"{uuid.uuid4()}.gw.test", "nowhere.example", "nowhere.example"):
                    async with session.get(server.make_url("/"), headers={"Host": host}) as r:
                        assert r.status == 404
                async with session.get(server.make_url("/healthz")) as r:
                    assert r.status == 200
            await asyncio.sleep(1.5)  # the gateway's report, every second
        finally:
            await server.close()

    asyncio.run(scenario())
    samples = scrape(client, carol)
    assert values(samples, "gpurental_gateway_requests_total", code="4xx") == [3]
    assert values(samples, "gpurental_gateway_requests_total", code="2xx") == [1]
    assert values(samples, "gpurental_gateway_request_duration_seconds_count") == [4]
    assert values(samples, "gpurental_gateway_processes") == [1]
    assert values(samples, "gpurental_gateway_websockets") == [0]
