"""gpurental.dbfailover: while no PostgreSQL answers (a primary lost, its replica not yet
promoted), a new connection keeps trying for DATABASE_CONNECT_RETRY_S, so a request
waits out a failover instead of failing."""

import socket
import threading
import time

import pytest
from django.db import OperationalError, connection
from django.db.utils import ConnectionHandler


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _target():
    """Where the test database listens: a unix socket folder or a TCP host."""
    host, port = connection.settings_dict["HOST"], connection.settings_dict["PORT"] or "5432"
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host or "127.0.0.1", int(port))


def _forward_later(port: int, delay: float, stop: threading.Event) -> threading.Thread:
    """After ``delay`` seconds, 127.0.0.1:port forwards to the test database: the
    "promoted primary" that starts answering while a connection is being tried."""
    family, address = _target()

    def pipe(a, b):
        try:
            while chunk := a.recv(65536):
                b.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (a, b):
                s.close()

    def serve():
        time.sleep(delay)
        server = socket.create_server(("127.0.0.1", port))
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            upstream = socket.socket(family)
            upstream.connect(address)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _connection_to(port: int):
    handler = ConnectionHandler(
        {"default": {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": str(port)}}
    )
    return handler["default"]


@pytest.mark.django_db
def test_a_new_connection_waits_for_a_database_that_comes_back(settings, caplog):
    settings.DATABASE_CONNECT_RETRY_S = 10
    port, stop = _free_port(), threading.Event()
    _forward_later(port, 1.0, stop)
    conn = _connection_to(port)
    started = time.monotonic()
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        conn.close()
        stop.set()
    assert time.monotonic() - started >= 1.0  # it waited rather than failed
    assert "no writable PostgreSQL yet" in caplog.text


@pytest.mark.django_db
def test_it_gives_up_after_the_setting_and_at_once_when_it_is_zero(settings):
    port = _free_port()  # nothing will ever listen there
    settings.DATABASE_CONNECT_RETRY_S = 0.8
    started = time.monotonic()
    with pytest.raises(OperationalError):
        _connection_to(port).ensure_connection()
    assert time.monotonic() - started >= 0.7
    settings.DATABASE_CONNECT_RETRY_S = 0
    started = time.monotonic()
    with pytest.raises(OperationalError):
        _connection_to(port).ensure_connection()
    assert time.monotonic() - started < 2  # one refused attempt, no pause
