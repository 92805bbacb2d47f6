"""Outgoing webhooks from the SDK (``client.webhooks``) and the CLI (``gpurental webhooks``),
against the real API on pytest-django's live server; events are POSTed to a real local
HTTP receiver, and the delivery log is read and re-sent through the SDK and the CLI."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.celery_app import app
from gpurental.client import Client, NotFound, ValidationError, cli
from gpurental.notifications.services import notify


class Receiver:
    """Records each POST; answers the next of ``codes`` (200 when they run out)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.codes: list[int] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append({"headers": dict(self.headers), "body": body})
                self.send_response(outer.codes.pop(0) if outer.codes else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def server(live_server, alice, settings, monkeypatch, tmp_path):
    settings.WEBHOOKS_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    monkeypatch.setenv("HOME", str(tmp_path))  # no saved login of the machine's user
    _, key = api_key_create(user=alice, name="cli")
    monkeypatch.setenv("GPURENTAL_API_KEY", key)
    monkeypatch.setenv("GPURENTAL_URL", live_server.url)
    yield live_server.url, key
    app.conf.task_always_eager = eager


def paid(user):
    notify(user, "payment_received", amount=Decimal("10"), reference="R-1")


def test_sdk_registers_lists_reads_resends_and_deletes(server, alice, bob, receiver):
    url, key = server
    client = Client(api_key=key, base_url=url)
    endpoint = client.webhooks.create(
        receiver.url, events=["payment_received"], description="billing bot"
    )
    assert endpoint.secret and endpoint.events == ["payment_received"] and endpoint.is_active
    [listed] = client.webhooks.list()
    assert listed.id == endpoint.id and listed.secret is None  # shown once only
    assert client.webhooks.get(endpoint).url == receiver.url

    receiver.codes = [500]
    paid(alice)
    [delivery] = client.webhooks.deliveries(endpoint=endpoint)
    assert delivery.event == "payment_received" and delivery.status == "failed"
    assert delivery.last_status_code == 500 and delivery.attempts == 1
    again = client.webhooks.resend(delivery)
    assert again.status == "delivered" and again.last_status_code == 200
    assert [a["status_code"] for a in again.attempt_log] == [500, 200]
    assert receiver.requests[0]["body"] == receiver.requests[1]["body"]
    # The POST is signed with the secret create() gave: HMAC over "timestamp.body".
    headers = receiver.requests[1]["headers"]
    signature = next(v for k, v in headers.items() if k.lower() == "x-gpurental-signature")
    parts = dict(p.split("=", 1) for p in signature.split(","))
    signed = f"{parts['t']}.".encode() + receiver.requests[1]["body"]
    expected = hmac.new(endpoint.secret.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(parts["v1"], expected)

    updated = client.webhooks.update(endpoint, is_active=False, description="paused")
    assert updated.is_active is False and updated.description == "paused"

    # Bob sees none of it: alice's endpoint and delivery are 404s to him.
    _, bob_key = api_key_create(user=bob, name="bob")
    bobs = Client(api_key=bob_key, base_url=url)
    assert bobs.webhooks.list() == [] and bobs.webhooks.deliveries() == []
    with pytest.raises(NotFound):
        bobs.webhooks.get(endpoint.id)
    with pytest.raises(NotFound):
        bobs.webhooks.resend(delivery.id)
    with pytest.raises(ValidationError):
        bobs.webhooks.deliveries(endpoint=endpoint.id)  # not one of his endpoints

    client.webhooks.delete(endpoint)
    assert client.webhooks.list() == []


def test_sdk_names_the_field_of_a_refused_url(server):
    url, key = server
    client = Client(api_key=key, base_url=url)
    with pytest.raises(ValidationError) as refused:
        client.webhooks.create("ftp://example.com/hook")
    assert "url" in str(refused.value)


def test_cli_adds_lists_shows_deliveries_resends_and_deletes(server, alice, receiver, capsys):
    assert cli.main(["webhooks", "add", receiver.url, "--events", "payment_received"]) == 0
    out = capsys.readouterr().out
    assert "Signing secret (shown only now" in out
    assert cli.main(["--json", "webhooks", "list"]) == 0
    [endpoint] = json.loads(capsys.readouterr().out)
    assert endpoint["url"] == receiver.url and endpoint["events"] == ["payment_received"]
    assert cli.main(["webhooks"]) == 0
    assert receiver.url in capsys.readouterr().out

    receiver.codes = [503]
    paid(alice)
    assert cli.main(["webhooks", "deliveries", "--endpoint", endpoint["id"]]) == 0
    table = capsys.readouterr().out
    assert "payment_received" in table and "failed" in table and "503" in table
    assert cli.main(["--json", "webhooks", "deliveries"]) == 0
    [delivery] = json.loads(capsys.readouterr().out)
    assert cli.main(["webhooks", "resend", delivery["id"]]) == 0
    assert "delivered (200)" in capsys.readouterr().out
    assert cli.main(["webhooks", "resend", "00000000-0000-0000-0000-000000000000"]) == 4
    assert cli.main(["webhooks", "deliveries", "--endpoint", "nope"]) == 2
    assert "endpoint" in capsys.readouterr().err

    assert cli.main(["webhooks", "delete", endpoint["id"]]) == 0
    assert cli.main(["--json", "webhooks", "list"]) == 0
    capsys.readouterr()
    assert cli.main(["webhooks", "list"]) == 0
    assert "No webhook endpoints" in capsys.readouterr().out
