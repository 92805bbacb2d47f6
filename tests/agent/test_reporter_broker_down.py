"""A report sent while the broker is down (restarting) waits for it and then goes out
once, against the real RabbitMQ on 127.0.0.1:5672 reached through a port that refuses
connections until the test opens it. A heartbeat does not wait: the next one follows."""

from __future__ import annotations

import socket
import threading
import uuid

import pytest
from celery import Celery
from kombu import Connection, Queue
from kombu.exceptions import OperationalError

from gpurental import protocol
from gpurental.agent import reporter as reporter_module
from gpurental.agent.reporter import ControlReporter
from gpurental.celery_app import REPORTS
from gpurental.testing.tcp_proxy import TcpProxy
from tests.agent.conftest import skip_unless_ci

RABBITMQ = ("127.0.0.1", 5672)
ADMIN_AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def reports_queue():
    """A queue of its own bound to the reports exchange for one made-up host's key."""
    with socket.socket() as sock:
        if sock.connect_ex(RABBITMQ) != 0:
            skip_unless_ci("no RabbitMQ on 127.0.0.1:5672")
    host = f"down-{uuid.uuid4().hex[:8]}"
    exchange = REPORTS.exchange  # the control plane's own declaration (a topic exchange)
    queue = Queue(
        f"test-{host}", exchange, routing_key=protocol.report_routing_key(host), auto_delete=False
    )
    with Connection(ADMIN_AMQP) as conn:
        queue(conn.default_channel).declare()
        yield host, queue
        queue(conn.default_channel).delete()


def _received(queue: Queue) -> list[dict]:
    with Connection(ADMIN_AMQP) as conn:
        bound = queue(conn.default_channel)
        messages = []
        while (message := bound.get(no_ack=True)) is not None:
            messages.append(message)
        return messages


def test_a_report_waits_for_the_broker_and_goes_out_once(reports_queue, monkeypatch):
    host, queue = reports_queue
    port = _closed_port()
    app = Celery("agent-test", broker=f"amqp://guest:guest@127.0.0.1:{port}//", fixups=[])
    # Kombu gives up opening a producer's channel after this long (4 s by default), as
    # OperationalError, outside its publish retry: the down time must outlast it.
    app.conf.broker_connection_timeout = 1
    monkeypatch.setattr(reporter_module, "REPORT_PAUSE_S", 0.2)
    reporter = ControlReporter(app, host_name=host, token="t" * 32)

    errors: list[BaseException] = []

    def report():
        try:
            reporter.report("i-1", "running", port=8888)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors.append(exc)

    sender = threading.Thread(target=report)
    sender.start()
    sender.join(3.0)
    assert sender.is_alive(), f"gave up while the broker was down: {errors}"

    proxy = TcpProxy(("127.0.0.1", port), RABBITMQ).start()  # the broker is back
    try:
        sender.join(60)
        assert not sender.is_alive() and not errors, errors
        messages = _received(queue)
    finally:
        proxy.close()
    assert len(messages) == 1
    body = messages[0].decode()
    kwargs = body[1] if isinstance(body, list) else body["kwargs"]
    assert (kwargs["instance_id"], kwargs["kind"], kwargs["data"]) == (
        "i-1",
        "running",
        {"port": 8888},
    )


def test_a_heartbeat_does_not_wait_for_the_broker(monkeypatch):
    app = Celery("agent-test", broker=f"amqp://guest:guest@127.0.0.1:{_closed_port()}//", fixups=[])
    app.conf.broker_connection_max_retries = 1
    reporter = ControlReporter(app, host_name="h", token="t" * 32)
    with pytest.raises(OperationalError):
        reporter.heartbeat(
            inventory=None,
            containers=None,
            containers_listed_at=None,
            runtime="process",
            gpu_source="fake",
            agent_version="test",
        )


def test_a_report_gives_up_after_its_deadline(monkeypatch):
    app = Celery("agent-test", broker=f"amqp://guest:guest@127.0.0.1:{_closed_port()}//", fixups=[])
    monkeypatch.setattr(reporter_module, "REPORT_DEADLINE_S", 1.0)
    monkeypatch.setattr(reporter_module, "REPORT_PAUSE_S", 0.2)
    monkeypatch.setattr(reporter_module, "REPORT_RETRY", {"max_retries": 1, "interval_start": 0})
    reporter = ControlReporter(app, host_name="h", token="t" * 32)
    with pytest.raises(OperationalError):
        reporter.report("i-1", "failed", reason="x")
