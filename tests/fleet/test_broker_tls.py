"""amqps:// for real: a throwaway RabbitMQ node with a TLS listener, on a certificate of a
test CA made here, that also asks every client for a certificate of that CA; the control
plane's Celery and the agent's reach it only when they check that CA and the broker's
name, and show a client certificate it trusts (issue 29)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import uuid

import pytest
from celery import Celery
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpurental import protocol
from gpurental.agent.config import AgentConfig
from gpurental.agent.worker import make_app
from gpurental.testing import rabbitmq
from gpurental.testing.agent_process import wait_for
from tests.agent.conftest import skip_unless_ci

pytestmark = pytest.mark.slow  # a RabbitMQ node


def _certificate(subject: str, key, issuer=None, issuer_key=None, *, ca: bool = False):
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            # kombu dials "localhost" as 127.0.0.1, and checks that name
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key or key, hashes.SHA256())


def _write_ca(directory, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(name, key, ca=True)
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key, path


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    problem = rabbitmq.available()
    if problem:
        skip_unless_ci(problem)
    base = tmp_path_factory.mktemp("rabbit-tls")
    ca, ca_key, ca_path = _write_ca(base, "test-ca")
    _, _, other_ca_path = _write_ca(base, "another-ca")
    server_key = ec.generate_private_key(ec.SECP256R1())
    (base / "server.pem").write_bytes(
        _certificate("localhost", server_key, ca, ca_key).public_bytes(serialization.Encoding.PEM)
    )
    (base / "server.key").write_bytes(_pem_key(server_key))
    client_key = ec.generate_private_key(ec.SECP256R1())
    (base / "client.pem").write_bytes(
        _certificate("tls-node", client_key, ca, ca_key).public_bytes(serialization.Encoding.PEM)
    )
    (base / "client.key").write_bytes(_pem_key(client_key))
    other_ca, other_key, _ = _write_ca(base, "clients-of-another-ca")
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    (base / "stranger.pem").write_bytes(
        _certificate("stranger", stranger_key, other_ca, other_key).public_bytes(
            serialization.Encoding.PEM
        )
    )
    (base / "stranger.key").write_bytes(_pem_key(stranger_key))
    node = rabbitmq.RabbitNode(base / "node")
    tls_port = _free_port()
    with (node.base / "rabbitmq.conf").open("a") as conf:
        conf.write(
            f"listeners.ssl.default = 127.0.0.1:{tls_port}\n"
            f"ssl_options.cacertfile = {ca_path}\n"
            f"ssl_options.certfile = {base / 'server.pem'}\n"
            f"ssl_options.keyfile = {base / 'server.key'}\n"
            "ssl_options.verify = verify_peer\n"
            "ssl_options.fail_if_no_peer_cert = true\n"
        )
    node.start()
    try:
        wait_for(lambda: rabbitmq._listening(tls_port), 30, "the TLS listener")
        yield {
            "url": f"amqps://guest:guest@localhost:{tls_port}//",
            "ca": str(ca_path),
            "other_ca": str(other_ca_path),
            "client": {"cert_file": str(base / "client.pem"), "key_file": str(base / "client.key")},
            "stranger": {
                "cert_file": str(base / "stranger.pem"),
                "key_file": str(base / "stranger.key"),
            },
        }
    finally:
        node.stop()


def _round_trip(url: str, use_ssl: dict) -> str:
    app = Celery("tls-check", broker=url)
    app.conf.broker_use_ssl = use_ssl
    app.conf.broker_connection_timeout = 5
    queue = f"tls-{uuid.uuid4().hex[:6]}"
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=0)
        simple = conn.SimpleQueue(queue, queue_opts={"auto_delete": True})
        simple.put({"hello": "over TLS"})
        body = simple.get(timeout=5).payload
        simple.close()
    return body["hello"]


def test_the_control_plane_reaches_an_amqps_broker_checking_its_ca(tls_broker):
    use_ssl = protocol.broker_ssl(ca_file=tls_broker["ca"], **tls_broker["client"])
    assert _round_trip(tls_broker["url"], use_ssl) == "over TLS"


def test_without_a_client_certificate_the_broker_trusts_the_connection_is_refused(tls_broker):
    """The client-certificate path: RabbitMQ asks for one (verify_peer,
    fail_if_no_peer_cert); none, or one of another CA, and the handshake fails."""
    for client in ({}, tls_broker["stranger"]):
        use_ssl = protocol.broker_ssl(ca_file=tls_broker["ca"], **client)
        with pytest.raises(Exception) as refused:  # noqa: PT011 - the TLS alert's wording varies
            _round_trip(tls_broker["url"], use_ssl)
        assert "over TLS" not in str(refused.value)


def test_a_broker_certificate_of_another_ca_or_name_is_refused(tls_broker):
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        _round_trip(
            tls_broker["url"],
            protocol.broker_ssl(ca_file=tls_broker["other_ca"], **tls_broker["client"]),
        )
    another_name = {
        **protocol.broker_ssl(ca_file=tls_broker["ca"], **tls_broker["client"]),
        "server_hostname": "evil",
    }
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        _round_trip(tls_broker["url"], another_name)


def test_the_agent_connects_over_amqps_with_its_ca_file(tls_broker, tmp_path):
    config = AgentConfig.from_env(
        {
            "GPURENTAL_BROKER_URL": tls_broker["url"],
            "GPURENTAL_BROKER_CA_FILE": tls_broker["ca"],
            "GPURENTAL_BROKER_CERT_FILE": tls_broker["client"]["cert_file"],
            "GPURENTAL_BROKER_KEY_FILE": tls_broker["client"]["key_file"],
            "GPURENTAL_HOST_NAME": "tls-node",
            "GPURENTAL_HOST_TOKEN": "t",
            "GPURENTAL_AGENT_DIR": str(tmp_path),
        }
    )
    app = make_app(config)
    assert app.conf.broker_use_ssl["cert_reqs"] == ssl.CERT_REQUIRED
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=0)
        assert conn.connected and conn.transport_cls == "amqps"


def test_readyz_reaches_an_amqps_broker_with_the_workers_tls_settings(tls_broker, settings):
    """/readyz checks the broker as the workers reach it: over amqps, with their CA and
    client certificate (it once connected with no TLS settings and always said 'error')."""
    from gpurental import health

    settings.CELERY_BROKER_URL = tls_broker["url"]
    settings.CELERY_BROKER_USE_SSL = protocol.broker_ssl(
        ca_file=tls_broker["ca"], **tls_broker["client"]
    )
    assert health._broker() == "ok"
    settings.CELERY_BROKER_USE_SSL = protocol.broker_ssl(
        ca_file=tls_broker["other_ca"], **tls_broker["client"]
    )
    assert health._broker().startswith("error")
