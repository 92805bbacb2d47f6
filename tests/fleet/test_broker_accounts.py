"""Per-host RabbitMQ accounts, against the real RabbitMQ on 127.0.0.1:5672: host A's
account consumes host.A and publishes reports with its own routing key, and nothing else:
not host B's queue, not commands to B, not reports as B, not the control exchange or
queue (a forged ``reconcile``). What gets through, the control worker refuses. A real
agent process runs on it."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import uuid

import pytest
import requests
from kombu import Connection, Exchange, Queue

from gpurental import protocol
from gpurental.accounts.models import AuditEvent
from gpurental.celery_app import REPORTS
from gpurental.celery_app import app as control_app
from gpurental.fleet import broker, hostlink
from gpurental.fleet.services import host_create, host_join_command, host_rotate_token
from gpurental.testing.agent_process import AgentProcess, wait_for
from tests.agent.conftest import skip_unless_ci

ADMIN_AMQP = "amqp://guest:guest@127.0.0.1:5672//"
MANAGEMENT = "http://guest:guest@127.0.0.1:15672"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def rabbitmq():
    if not _listening(5672):
        skip_unless_ci("no RabbitMQ on 127.0.0.1:5672")
    if not _listening(15672) and shutil.which("rabbitmq-plugins"):
        # The management API is off by default; enabling it takes effect at once.
        subprocess.run(["rabbitmq-plugins", "enable", "rabbitmq_management"], check=False)
    wait_for(lambda: _listening(15672), 60, "the RabbitMQ management API")
    wait_for(lambda: requests.get(f"{MANAGEMENT}/api/overview", timeout=2).ok, 60, "management API")


@pytest.fixture
def accounts(rabbitmq, settings, db):
    settings.CELERY_BROKER_URL = ADMIN_AMQP
    settings.RABBITMQ_MANAGEMENT_URL = MANAGEMENT
    suffix = uuid.uuid4().hex[:6]
    hosts = {}
    for key in ("a", "b"):
        host, token = host_create(name=f"rmq-{key}-{suffix}")
        hosts[key] = (host, token)
    with Connection(ADMIN_AMQP) as admin:  # what the control plane declares
        channel = admin.channel()
        for host, _ in hosts.values():
            Queue(host.queue, Exchange(host.queue), routing_key=host.queue)(channel).declare()
        Exchange(protocol.CONTROL_QUEUE, type="direct", durable=True)(channel).declare()
        control_app.amqp.queues.select_add(REPORTS)  # as the control worker does
        REPORTS(channel).declare()
        REPORTS(channel).purge()
    yield hosts
    with Connection(ADMIN_AMQP) as admin:
        channel = admin.channel()
        for host, _ in hosts.values():
            with contextlib.suppress(Exception):
                channel.queue_delete(host.queue)
            with contextlib.suppress(Exception):
                channel.exchange_delete(host.queue)
            broker.broker_account_delete(host_name=host.name)


def as_host(host, token) -> Connection:
    return Connection(
        broker.agent_broker_url(host_name=host.name, password=token),
        transport_options={"confirm_publish": True},
    )


def refused(action) -> bool:
    from amqp.exceptions import AccessRefused, NotAllowed

    try:
        action()
    except (AccessRefused, NotAllowed):
        return True
    return False


def test_a_hosts_account_reads_only_its_own_queue(accounts):
    (a, a_token), (b, _) = accounts["a"], accounts["b"]
    with as_host(a, a_token) as conn:
        assert conn.default_channel.queue_declare(a.queue, passive=True)  # its own: fine
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.basic_get(b.queue))
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.queue_purge(b.queue))


def test_a_hosts_account_cannot_command_another_host(accounts):
    (a, a_token), (b, _) = accounts["a"], accounts["b"]
    forged = {"host": b.name, "instance_id": str(uuid.uuid4())}
    with as_host(a, a_token) as conn:
        producer = conn.Producer()
        assert refused(
            lambda: producer.publish(json.dumps(forged), exchange=b.queue, routing_key=b.queue)
        )


def test_a_hosts_account_publishes_its_own_reports_and_nothing_to_the_control_queue(accounts):
    (a, a_token), (b, _) = accounts["a"], accounts["b"]
    with as_host(a, a_token) as conn:
        conn.Producer().publish(
            "{}",
            exchange=protocol.REPORTS_EXCHANGE,
            routing_key=protocol.report_routing_key(a.name),
        )
    with as_host(a, a_token) as conn:  # speaking for B: refused by the topic permission
        assert refused(
            lambda: conn.Producer().publish(
                "{}",
                exchange=protocol.REPORTS_EXCHANGE,
                routing_key=protocol.report_routing_key(b.name),
            )
        )
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.queue_delete(protocol.CONTROL_QUEUE))
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.queue_purge(protocol.REPORTS_QUEUE))
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.queue_declare("anything-else"))


def forged_reconcile(conn: Connection, **route) -> None:
    """A ``reconcile`` as Celery would publish it, sent with a host's account."""
    from celery import Celery

    forger = Celery("forger", broker=conn.as_uri(include_password=True))
    forger.conf.broker_transport_options = {"confirm_publish": True}
    forger.conf.task_publish_retry = False
    forger.send_task("gpurental.rentals.tasks.reconcile", declare=[], **route)


def test_a_forged_reconcile_is_refused_at_the_broker_and_at_the_worker(accounts, monkeypatch):
    """Host A publishes ``reconcile``: to the control exchange the broker refuses it (before
    issue 29 it was let through, and the control worker ran it); through its own report
    route it reaches the reports queue, where the control worker refuses it."""
    from gpurental.rentals import tasks

    a, a_token = accounts["a"]
    with as_host(a, a_token) as conn:
        assert refused(
            lambda: forged_reconcile(conn, exchange=protocol.CONTROL_QUEUE, routing_key="control")
        )
    with as_host(a, a_token) as conn:
        forged_reconcile(conn, **protocol.report_route(ADMIN_AMQP, a.name))
    with Connection(ADMIN_AMQP) as admin:
        message = wait_for(
            lambda: REPORTS(admin.default_channel).get(no_ack=True),
            10,
            "the forged reconcile in the reports queue",
        )
    assert message.headers["task"] == "gpurental.rentals.tasks.reconcile"
    runs = []
    monkeypatch.setattr(tasks, "reconcile_pass", lambda: runs.append(1))
    task = control_app.tasks["gpurental.rentals.tasks.reconcile"]
    task.push_request(delivery_info=message.delivery_info)  # as the worker runs it
    try:
        task()
    finally:
        task.pop_request()
    assert runs == []
    audit = AuditEvent.objects.get(action="host.task_refused")
    assert audit.object_repr == a.name and "not a report task" in audit.changes["why"]


def test_a_wrong_password_is_refused_and_rotation_changes_it(accounts):
    from amqp.exceptions import AccessRefused

    a, a_token = accounts["a"]
    with pytest.raises(AccessRefused), as_host(a, "not-the-token") as conn:
        conn.connect()
    new_token = host_rotate_token(host=a)
    with pytest.raises(AccessRefused), as_host(a, a_token) as conn:
        conn.connect()
    with as_host(a, new_token) as conn:
        conn.connect()


def test_the_join_command_names_the_hosts_own_account_and_docker(accounts):
    a, a_token = accounts["a"]
    command = host_join_command(host=a, token=a_token)
    assert f"amqp://gpurental-host-{a.name}:{a_token}@127.0.0.1:5672//" in command
    assert "GPURENTAL_RUNTIME='docker'" in command
    assert "guest" not in command and "redis" not in command.lower()


@pytest.mark.slow  # an agent process
def test_a_real_agent_runs_on_its_restricted_account(accounts, tmp_path):
    """The account's rights are enough for a real agent: its worker consumes host.<name>
    and its heartbeats reach the control exchange, signed with its key."""
    a, a_token = accounts["a"]
    with Connection(ADMIN_AMQP) as admin:
        channel = admin.channel()
        listen = Queue(
            f"test-reports-{uuid.uuid4().hex[:6]}",
            REPORTS.exchange,
            routing_key=protocol.report_routing_key(a.name),
            auto_delete=True,
        )(channel)
        listen.declare()
        agent = AgentProcess(
            broker_url=broker.agent_broker_url(host_name=a.name, password=a_token),
            host_name=a.name,
            token=a_token,
            log_path=tmp_path / "agent.log",
            GPURENTAL_RUNTIME="process",
            GPURENTAL_AGENT_DIR=str(tmp_path / "work"),
            GPURENTAL_TELEMETRY_URL="off",
        )
        agent.start()
        try:
            message = wait_for(lambda: listen.get(no_ack=True), 60, "a heartbeat", agent)
            _, kwargs, _ = message.decode()
            payload = protocol.verify(hostlink.keys_of(a.keys_sealed).sign, kwargs, host=a.name)
            assert message.headers["task"] == protocol.HEARTBEAT
            assert payload["runtime"] == "process"
            assert "ACCESS_REFUSED" not in agent.log()
        finally:
            agent.stop()
