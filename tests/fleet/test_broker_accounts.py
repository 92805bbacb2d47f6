"""Per-host RabbitMQ accounts, against the real RabbitMQ on 127.0.0.1:5672: host A's
account consumes host.A and publishes reports, and nothing else: not host B's queue,
not commands to B, not the control queue itself. A real agent process runs on it."""

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
from gpurental.fleet import broker
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


def test_a_hosts_account_publishes_reports_but_cannot_touch_the_control_queue(accounts):
    a, a_token = accounts["a"]
    with as_host(a, a_token) as conn:
        conn.Producer().publish(
            "{}", exchange=protocol.CONTROL_QUEUE, routing_key="nowhere-in-particular"
        )
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.queue_delete(protocol.CONTROL_QUEUE))
    with as_host(a, a_token) as conn:
        assert refused(lambda: conn.default_channel.queue_declare("anything-else"))


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
            f"test-control-{uuid.uuid4().hex[:6]}",
            Exchange(protocol.CONTROL_QUEUE, type="direct", durable=True),
            routing_key=protocol.CONTROL_QUEUE,
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
            payload = protocol.verify(a.token_hash, kwargs, host=a.name)
            assert message.headers["task"] == protocol.HEARTBEAT
            assert payload["runtime"] == "process"
            assert "ACCESS_REFUSED" not in agent.log()
        finally:
            agent.stop()
